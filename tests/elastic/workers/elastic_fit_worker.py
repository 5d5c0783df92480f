"""Worker: a plain `fit` script, run elastically or as one process.

Nothing elastic in it: a callback records `strategy.size`/`strategy.rank`
per global step into `progress.jsonl` (which the test watches to change the
discovery output) and, on the chief, sleeps `step_sleep` seconds per step
while the file `pace` exists and waits at step `hold_at_step` while
`hold` exists, so that joiners have time to start. The chief (or the one
process) saves the final weights. Ranks seed differently on purpose,
except for the models with tables (all but `mlp`): a partitioned table
keeps each worker's own initial rows, so every rank seeds alike and the
chief saves the initial weights for the reference.

`--kill_rank`, if set, makes the worker of that rank (or of each rank of
a comma-separated list) die by SIGKILL at
its `--kill_after`-th step while the job has `--kill_size` workers (at
its end, or with `--kill_on=begin` at its start: within a step of the
resize to that size, before its first commit, for `--kill_after=1`), after
writing `--slots_after` into the discovery file `--slots_file` (its slot
is gone): a grow, a shrink and a lost worker in one job.
"""

import json
import os
import signal
import time

import elastic_cases as cases  # noqa: I001  (sits beside this script)
import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

import keras_hybrid as kh
from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.testing import SPARSE_TABLES
from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import save_result

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", None, "Where to save results.")
flags.DEFINE_integer("epochs", 3, "Epochs.")
flags.DEFINE_integer("batch_size", 12, "Global batch size.")
flags.DEFINE_integer("num_samples", 600, "Samples.")
flags.DEFINE_float("step_sleep", 0.0, "Seconds to sleep after each step.")
flags.DEFINE_integer(
    "hold_at_step", 0, "Chief waits at this step while out_dir/hold exists."
)
flags.DEFINE_string("optimizer", "adam", "sgd or adam.")
flags.DEFINE_enum("model", "mlp", cases.MODELS, "mlp, or a model with tables.")
flags.DEFINE_list("kill_rank", [], "Ranks of the workers that die.")
flags.DEFINE_integer("kill_size", 3, "Job size at which it dies.")
flags.DEFINE_integer("kill_after", 5, "Its steps at that size before.")
flags.DEFINE_enum(
    "kill_on", "end", ("begin", "end"), "At the end or the start of it."
)
flags.DEFINE_string("slots_file", None, "Discovery output to rewrite.")
flags.DEFINE_float("timeout_seconds", 300.0, "Strategy's timeout_seconds.")
flags.DEFINE_string("slots_after", "localhost:2", "Slots after the death.")
flags.DEFINE_bool(
    "auto_place",
    False,
    "Tables placed by the strategy's own rule (no `variable_kinds`), as "
    "a script written for stock Keras gets.",
)
flags.DEFINE_integer(
    "validation", 0, "If set, validate on the first this many samples."
)
flags.DEFINE_integer(
    "accumulation", 0, "The optimizer's gradient_accumulation_steps, if set."
)
flags.DEFINE_integer("steps_per_execution", 1, "Compile's steps_per_execution.")


class SizeLog(keras.callbacks.Callback):
    """Records the membership each step sees (what acceptance reads)."""

    def __init__(self, strategy, path):
        super().__init__()
        self.strategy = strategy
        self.path = path
        self.step = 0
        # Each traced train step the chief ran, and how often it was traced.
        self.steps = {}
        self.steps_at_kill_size = 0

    def on_train_batch_begin(self, batch, logs=None):
        if FLAGS.kill_on == "begin":
            self._maybe_die(self.steps_at_kill_size + 1)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self._at_kill_size():
            self.steps_at_kill_size += 1
            if FLAGS.kill_on == "end":
                self._maybe_die(self.steps_at_kill_size)
        if not self.strategy.is_chief:
            return
        traced = keras_compat.traced_step_of(self.model.train_function)
        if traced is not None:
            self.steps[id(traced)] = traced.experimental_get_tracing_count()
        with open(self.path, "a") as f:
            f.write(
                json.dumps({"step": self.step, "size": self.strategy.size})
                + "\n"
            )
        # The chief paces the job while the test's `pace` file exists, and
        # holds at one step while `hold` exists (joiners need time to start).
        if os.path.exists(os.path.join(FLAGS.out_dir, "pace")):
            time.sleep(FLAGS.step_sleep)
        hold = os.path.join(FLAGS.out_dir, "hold")
        deadline = time.monotonic() + 300
        while self.step == FLAGS.hold_at_step and os.path.exists(hold):
            if time.monotonic() > deadline:
                raise RuntimeError("The test never released the hold.")
            time.sleep(0.05)

    def _at_kill_size(self) -> bool:
        strategy = self.strategy
        return (
            str(strategy.rank) in FLAGS.kill_rank
            and strategy.size == FLAGS.kill_size
        )

    def _maybe_die(self, step_at_kill_size: int):
        if not self._at_kill_size() or step_at_kill_size != FLAGS.kill_after:
            return
        if FLAGS.kill_on == "begin":
            _wait_until_applied()
        with open(FLAGS.slots_file + ".tmp", "w") as f:
            f.write(FLAGS.slots_after + "\n")
        os.replace(FLAGS.slots_file + ".tmp", FLAGS.slots_file)
        os.kill(os.getpid(), signal.SIGKILL)


def _wait_until_applied() -> None:
    """Waits until the launcher knows the latest plan took effect, so that
    it counts the joiners among the survivors (a loss it sees first
    cancels the grow and stops them)."""
    directory = os.environ["KERAS_HYBRID_ELASTIC_DIR"]
    plans = [n for n in os.listdir(directory) if n.startswith("plan-")]
    latest = max(int(n[len("plan-") : -len(".json")]) for n in plans)
    applied = os.path.join(directory, f"applied-{latest}.json")
    deadline = time.monotonic() + 60
    while not os.path.exists(applied) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the launcher reads it every tick


def _dynamic_result(model) -> dict:
    """Every worker's keys and rows of the dynamic table, whether each
    lives on its owner, the counters, and the dense layers' weights
    (collectives: every member calls it)."""
    layer = model.get_layer("dyn")
    keys, values = layer.live_rows()
    per_worker = layer.worker_stats()
    ends = np.cumsum([s["rows"] for s in per_worker])
    owners = layer.key_owners.owner_of(tf.constant(keys, tf.int64)).numpy()
    ranks = np.searchsorted(ends, np.arange(len(keys)), side="right")
    return {
        "keys": keys,
        "rows": values,
        "on_owners": bool((owners == ranks).all()),
        "stats": layer.stats(),
        "dense": cases.dense_weights(model),
        "shards": layer.key_owners.assignment.counts().tolist(),
    }


def main(argv):
    del argv
    table = FLAGS.model != "mlp"
    kinds = SPARSE_TABLES if table else {".*": "dense"}
    strategy = kh.HybridStrategy(
        variable_kinds=None if FLAGS.auto_place else kinds,
        timeout_seconds=FLAGS.timeout_seconds,
    )
    x, y = cases.make_data(FLAGS.model, FLAGS.num_samples)
    seed = 100 if table else 100 + strategy.rank
    with strategy.scope():
        model = cases.build_model(FLAGS.model, seed=seed)
        extra = {}
        if FLAGS.accumulation:
            extra["gradient_accumulation_steps"] = FLAGS.accumulation
        models.compile_model(
            model,
            FLAGS.optimizer,
            steps_per_execution=FLAGS.steps_per_execution,
            **extra,
        )
    # A collective among the first members; a joiner holds all its rows.
    initial = model.get_weights() if table else None
    stats = kh.callbacks.CommunicationStats(every_n_steps=5)
    size_log = SizeLog(strategy, os.path.join(FLAGS.out_dir, "progress.jsonl"))
    validation = None
    if FLAGS.validation:
        head = slice(0, FLAGS.validation)
        validation = (
            [a[head] for a in x] if isinstance(x, (list, tuple)) else x[head],
            y[head],
        )
    history = model.fit(
        x,
        y,
        validation_data=validation,
        batch_size=FLAGS.batch_size,
        epochs=FLAGS.epochs,
        shuffle=False,
        verbose=0,
        callbacks=[
            size_log,
            # Collectives in callbacks: a joiner must not run them for the
            # batches it skips.
            stats,
        ],
    )
    # A collective with a partitioned table: every member reads.
    weights = model.get_weights()
    dynamic = (
        _dynamic_result(model) if FLAGS.model.startswith("dynamic") else {}
    )
    if strategy.is_chief:
        save_result(
            FLAGS.out_dir,
            0,
            {
                "weights": weights,
                "history": history.history,
                "resizes": strategy.communicator.stats.resizes,
                "stats_resizes": stats.summary["resizes"],
                "size": strategy.size,
                "initial": initial,
                "plan": str(strategy.plan),
                "traces": sorted(size_log.steps.values()),
                **dynamic,
            },
        )


if __name__ == "__main__":
    app.run(main)
