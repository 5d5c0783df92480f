"""`python -m keras_hybrid.benchmark`: modes side by side, in one run.

```sh
python -m keras_hybrid.benchmark --workload=lm --workers=4 \\
    --modes=hybrid,allgather,dense --steps=20 --netem=10gbit:50us \\
    --output_json=lm.json --plot=lm.png
```

Every mode is a separate launch of the same workload, on the same data
and seeds, on `--workers` processes (each in its own network namespace
with `--netem`). Each rank saves its step times and traffic; this process
reads them, prints a table, and writes the JSON and the plot.
"""

import json
import os
import sys
import tempfile

from absl import app
from absl import flags
from absl import logging

from keras_hybrid.benchmark import config_flags
from keras_hybrid.benchmark import modes
from keras_hybrid.benchmark import netem
from keras_hybrid.benchmark import results
from keras_hybrid.launch import launcher
from keras_hybrid.launch.topology import free_ports
from keras_hybrid.launch.worker_command import WorkerCommand
from keras_hybrid.launch.worker_env import worker_env
from keras_hybrid.launch.worker_group import WorkerGroup
from keras_hybrid.launch.worker_spec import WorkerSpec

FLAGS = flags.FLAGS
config_flags.define_flags()
flags.DEFINE_integer("workers", 4, "Worker processes per mode.", lower_bound=1)
flags.DEFINE_list(
    "modes",
    ["hybrid", "allgather", "dense"],
    f"Modes to compare, in order; among {modes.names()}.",
)
flags.DEFINE_string(
    "netem",
    "",
    "BANDWIDTH:LATENCY (e.g. 10gbit:50us): run every worker in its own "
    "network namespace with this link. Needs root. Empty: loopback.",
)
flags.DEFINE_string("output_json", "", "Write the results here.")
flags.DEFINE_string("plot", "", "Write a PNG of the results here.")
flags.DEFINE_integer(
    "threads", 1, "Intra- and inter-op threads per worker.", lower_bound=1
)
flags.DEFINE_float(
    "timeout", 900.0, "Seconds allowed per mode.", lower_bound=1.0
)
flags.DEFINE_integer(
    "repeats",
    1,
    "Run the list of modes this many times in turn and report, per mode, "
    "the median over repeats (a shared machine's load drifts).",
    lower_bound=1,
)
flags.DEFINE_integer(
    "callback_overhead_repeats",
    0,
    "If > 0, the first mode also fits the measured steps this many times "
    "with and without CommunicationStats, alternating, and reports the "
    "ratio of fit times.",
    lower_bound=0,
)


def worker_commands(
    argv: list[str], num_workers: int, threads: int, network=None
) -> list[WorkerCommand]:
    """One command per rank: on loopback, or inside `network`'s netns."""
    # TensorFlow's C++ start-up lines, times N workers, hide the progress.
    quiet = {
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
    }
    if network is None:
        return launcher.plan_workers(
            argv, num_workers, threads=threads, env=quiet
        )
    port = free_ports(1)[0]
    specs = [
        WorkerSpec(rank, num_workers, rank, num_workers, address, port)
        for rank, address in enumerate(network.addresses)
    ]
    cluster = [spec.address for spec in specs]
    return [
        WorkerCommand(
            spec.rank,
            network.wrap(spec.rank, argv),
            {
                **os.environ,
                **worker_env(spec, cluster, threads=threads, extra_env=quiet),
            },
        )
        for spec in specs
    ]


def run_mode(mode: modes.Mode, network, overhead_repeats: int) -> dict:
    """Launches one mode on all workers; returns its summarized result."""
    with tempfile.TemporaryDirectory(prefix=f"khbench_{mode.name}_") as out:
        argv = [
            sys.executable,
            "-m",
            "keras_hybrid.benchmark.worker",
            f"--mode={mode.name}",
            f"--out_dir={out}",
            f"--overhead_repeats={overhead_repeats}",
            *config_flags.worker_argv(FLAGS),
        ]
        commands = worker_commands(argv, FLAGS.workers, FLAGS.threads, network)
        code = WorkerGroup(commands).run(timeout=FLAGS.timeout)
        if code in (130, 143):  # The launcher got SIGINT or SIGTERM.
            raise KeyboardInterrupt
        if code:
            raise RuntimeError(
                f"Mode {mode.name!r} failed: the workers exited with code "
                f"{code} (124 = --timeout of {FLAGS.timeout:g}s). Their "
                "output is above."
            )
        return results.summarize(
            mode.name, results.read_ranks(out, FLAGS.workers)
        )


def run_all(chosen: list[modes.Mode], network) -> list[dict]:
    """Every runnable mode, `--repeats` times in turn; one result each."""
    runnable = []
    for mode in chosen:
        if mode.skip_reason:
            logging.warning("%s", mode.skip_reason)
        else:
            runnable.append(mode)
    by_mode = {mode.name: [] for mode in runnable}
    for repeat in range(FLAGS.repeats):
        for i, mode in enumerate(runnable):
            logging.info(
                "repeat %d/%d, mode %d/%d: %s (%s), %d workers, %d + %d steps",
                repeat + 1,
                FLAGS.repeats,
                i + 1,
                len(runnable),
                mode.name,
                mode.description,
                FLAGS.workers,
                FLAGS.warmup_steps,
                FLAGS.steps,
            )
            first = repeat == 0 and i == 0
            overhead = FLAGS.callback_overhead_repeats if first else 0
            result = run_mode(mode, network, overhead)
            logging.info("mode %s: %s", mode.name, json.dumps(result))
            by_mode[mode.name].append(result)
    return [results.merge_repeats(runs) for runs in by_mode.values()]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        chosen = modes.resolve(FLAGS.modes)
        config_flags.config_from_flags(FLAGS)
        spec = netem.parse(FLAGS.netem) if FLAGS.netem else None
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    except RuntimeError as error:  # A mode that cannot run here.
        logging.error("%s", error)
        sys.exit(1)
    try:
        if spec is None:
            measured = run_all(chosen, None)
        else:
            with netem.EmulatedNetwork(FLAGS.workers, spec) as network:
                measured = run_all(chosen, network)
    except (PermissionError, RuntimeError, FileNotFoundError) as error:
        logging.error("%s", error)
        sys.exit(1)
    report = {
        "workload": FLAGS.workload,
        "workers": FLAGS.workers,
        "netem": FLAGS.netem or None,
        "steps": FLAGS.steps,
        "repeats": FLAGS.repeats,
        "results": measured,
    }
    logging.info("results:\n%s", results.table(measured))
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as f:
            json.dump(report, f, indent=1)
        logging.info("wrote %s", FLAGS.output_json)
    if FLAGS.plot:
        results.plot(report, FLAGS.plot)
        logging.info("wrote %s", FLAGS.plot)


if __name__ == "__main__":
    app.run(main)
