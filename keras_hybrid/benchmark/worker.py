"""One benchmark worker: trains a workload in one mode, saves its figures.

Started by `python -m keras_hybrid.benchmark` on every rank through the
launcher (`python -m keras_hybrid.benchmark.worker --mode=hybrid ...`).
Each rank writes `rank<r>.json` into `--out_dir`:

- `step_seconds`: wall time of each measured train step on this rank;
- `comm`: `CommunicationStats.summary` (per-rank traffic per step);
- `lower_bound_bytes`: this rank's traffic lower bound per step (mean);
- `overhead`: fit times with and without `CommunicationStats`, if asked;
- `interface_bytes`: bytes the worker's `eth0` sent and received per
  measured step (from `/proc/self/net/dev`), when the worker has a network
  namespace of its own (`--netem`, or one worker per emulated host); else
  `None`.
"""

import json
import os
import time

import keras
import numpy as np
from absl import app
from absl import flags
from absl import logging

from keras_hybrid.benchmark import config_flags
from keras_hybrid.benchmark import modes
from keras_hybrid.benchmark import traffic_bound
from keras_hybrid.benchmark import workloads
from keras_hybrid.callbacks.communication_stats import CommunicationStats
from keras_hybrid.callbacks.hot_rows_refresh import HotRowsRefresh

FLAGS = flags.FLAGS
config_flags.define_flags()
flags.DEFINE_string("mode", "hybrid", "Mode to run (see modes.py).")
flags.DEFINE_string("out_dir", None, "Where rank<r>.json goes.")
flags.DEFINE_integer(
    "overhead_repeats",
    0,
    "If > 0, after measuring, fit the measured steps this many times with "
    "and this many times without CommunicationStats, alternating.",
    lower_bound=0,
)
flags.DEFINE_boolean(
    "interface_counters",
    False,
    "Record eth0's byte counters around the measured steps (set when the "
    "worker has a network namespace of its own).",
)
flags.mark_flag_as_required("out_dir")


class StepTimer(keras.callbacks.Callback):
    """Wall time of every train step (batch begin to batch end)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def _timed(hook, counter: str = "hook_seconds"):
    """`hook`, adding the wall time it takes to `self.<counter>`."""

    def timed_hook(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return hook(self, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            setattr(self, counter, getattr(self, counter) + elapsed)

    return timed_hook


class TimedCommunicationStats(CommunicationStats):
    """`CommunicationStats` that adds up the time spent in its own hooks
    (its direct cost, which the fit-time ratio is too noisy to show)."""

    hook_seconds = 0.0  # all hooks
    batch_seconds = 0.0  # the per-step hook alone
    on_train_begin = _timed(CommunicationStats.on_train_begin)
    on_epoch_begin = _timed(CommunicationStats.on_epoch_begin)
    on_train_batch_end = _timed(
        _timed(CommunicationStats.on_train_batch_end), "batch_seconds"
    )
    on_epoch_end = _timed(CommunicationStats.on_epoch_end)
    on_train_end = _timed(CommunicationStats.on_train_end)


class StepProgress(keras.callbacks.Callback):
    """Logs every `every` steps, so long runs show they are alive."""

    def __init__(self, label: str, every: int = 10) -> None:
        super().__init__()
        self._label, self._every = label, every

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self._every == 0:
            logging.info("%s: step %d done", self._label, batch + 1)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    config = config_flags.config_from_flags(FLAGS)
    keras.utils.set_random_seed(config.seed)
    mode = modes.get(FLAGS.mode)
    strategy = mode.make_strategy(hot_rows=FLAGS.hot_rows)
    with strategy.scope():
        model, dataset = workloads.build(FLAGS.workload, config, strategy.size)
    label = f"{FLAGS.mode} rank {strategy.rank}"
    warmup = dataset.take(FLAGS.warmup_steps)
    measured = dataset.skip(FLAGS.warmup_steps)
    model.fit(warmup, verbose=0, shuffle=False)
    extra = []
    if mode.hot_rows:
        hot = HotRowsRefresh(every=FLAGS.hot_every)
        hot.set_model(model)
        hot.refresh()  # from the warm-up's counts
        extra.append(hot)
    logging.info("%s: warm-up done, measuring %d steps", label, FLAGS.steps)
    interface_before = interface_counters()
    calls_before = strategy.communicator.stats.snapshot()
    cross_before = strategy.communicator.stats.cross_host_snapshot()
    timer = StepTimer()
    stats = CommunicationStats(log_table_on_chief=strategy.is_chief)
    progress = StepProgress(label)
    model.fit(
        measured,
        verbose=0,
        shuffle=False,
        callbacks=[timer, stats, progress, *extra],
    )
    interface_after = interface_counters()
    calls = strategy.communicator.stats.delta(calls_before)
    cross = strategy.communicator.stats.cross_host_delta(cross_before)
    result = {
        "rank": strategy.rank,
        "size": strategy.size,
        "mode": FLAGS.mode,
        "global_batch": config.batch_per_worker * strategy.size,
        "step_seconds": timer.seconds,
        "comm": {
            "columns": stats.summary["columns"],
            "per_rank": stats.summary["per_rank"].tolist(),
        },
        # Collectives issued per step, by path; `control` includes the
        # step's metric reductions and the callback's one report.
        "calls_per_step": {
            path: calls[path]["calls"] / FLAGS.steps for path in calls
        },
        # Bytes sent to workers on other hosts per step, by path (zero
        # where the hosts are not known), and the exchange that ran.
        "cross_host_bytes_per_step": {
            path: cross[path]["bytes"] / FLAGS.steps for path in cross
        },
        "hierarchical": bool(strategy.communicator.hierarchical),
        "lower_bound_bytes": traffic_bound.lower_bound_bytes(
            FLAGS.workload,
            config,
            model,
            strategy.rank,
            strategy.size,
            FLAGS.warmup_steps,
        ),
    }
    result["interface_bytes"] = None
    if FLAGS.interface_counters and interface_before and interface_after:
        result["interface_bytes"] = {
            key: (interface_after[key] - interface_before[key]) / FLAGS.steps
            for key in ("sent", "received")
        }
    if FLAGS.overhead_repeats:
        result["overhead"] = _overhead(model, measured, FLAGS.overhead_repeats)
    path = os.path.join(FLAGS.out_dir, f"rank{strategy.rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def interface_counters(name: str = "eth0") -> dict | None:
    """Bytes `name` has sent and received so far in this process's network
    namespace, or `None` without such an interface (e.g. on loopback)."""
    try:
        with open("/proc/self/net/dev") as f:
            lines = f.readlines()
    except OSError:
        return None
    for line in lines:
        interface, sep, fields = line.partition(":")
        if sep and interface.strip() == name:
            values = fields.split()
            # Receive: bytes packets ... (8 fields); transmit: bytes ...
            return {"received": int(values[0]), "sent": int(values[8])}
    return None


def _overhead(model, dataset, repeats: int) -> dict:
    """Fit times of `dataset` without and with `CommunicationStats`.

    Both runs have a `StepTimer`; they alternate so that drifts in machine
    load hit both alike.
    """
    without, with_stats, in_hooks, in_batch = [], [], [], []
    for i in range(repeats):
        timed = TimedCommunicationStats(log_table_on_chief=False)
        for times, extra in ((without, []), (with_stats, [timed])):
            start = time.perf_counter()
            model.fit(
                dataset,
                verbose=0,
                shuffle=False,
                callbacks=[StepTimer(), *extra],
            )
            times.append(time.perf_counter() - start)
        in_hooks.append(timed.hook_seconds)
        in_batch.append(timed.batch_seconds)
        logging.info("overhead check: round %d of %d done", i + 1, repeats)
    return {
        "without_seconds": without,
        "with_seconds": with_stats,
        "hook_seconds": in_hooks,
        "batch_hook_seconds": in_batch,
        "ratio_of_medians": float(np.median(with_stats) / np.median(without)),
        "hook_share": float(np.sum(in_hooks) / np.sum(with_stats)),
    }


if __name__ == "__main__":
    app.run(main)
