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

Network-scaled runs (`--target_step_ms`, `--target_bandwidth`) first
measure this machine's step time with unlimited links, then limit every
link so that communication takes the share of a step it would take on the
stated target cluster, and log per mode the speed-up over allgather that
the target allows from bytes alone beside the measured one
(`target_cluster`); see docs/benchmarks.md. `--emulated_hosts=H` puts
the workers on H namespaces that act as hosts, each running sshd, and
starts them with `keras-hybrid-run --hosts` over ssh.

```sh
python -m keras_hybrid.benchmark --workload=lm --workers=4 \\
    --target_step_ms=5 --target_bandwidth=10gbit
```
"""

# First: keeps TensorFlow's banners off `--help`.
from keras_hybrid.utils import help_first  # isort: skip

import json
import os
import sys
import tempfile

from absl import app
from absl import flags
from absl import logging

from keras_hybrid.benchmark import cli_flags
from keras_hybrid.benchmark import config_flags
from keras_hybrid.benchmark import modes
from keras_hybrid.benchmark import results
from keras_hybrid.benchmark import target_cluster
from keras_hybrid.contract.worker_env import worker_env
from keras_hybrid.contract.worker_spec import WorkerSpec
from keras_hybrid.emulation import network as netem
from keras_hybrid.emulation.hosts import EmulatedHosts
from keras_hybrid.launch import launcher
from keras_hybrid.launch.preloader import DEFAULT_MODULES
from keras_hybrid.launch.preloader import Preloader
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV
from keras_hybrid.launch.topology import free_ports
from keras_hybrid.launch.worker_command import WorkerCommand
from keras_hybrid.launch.worker_group import WorkerGroup

FLAGS = flags.FLAGS
config_flags.define_flags()
cli_flags.define_flags()
flags.adopt_module_key_flags(config_flags)
flags.adopt_module_key_flags(cli_flags)


# Every mode's loopback workers fork from one server that imported
# TensorFlow and Keras once (`launch.preloader`); `main` closes it.
_PRELOADER = Preloader(DEFAULT_MODULES)


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
    if isinstance(network, EmulatedHosts):
        per_host = num_workers // len(network.names)
        hosts = ",".join(f"{name}:{per_host}" for name in network.names)
        os.environ[SSH_COMMAND_ENV] = network.ssh_command
        logging.info("workers start over ssh, as with --hosts %s", hosts)
        return launcher.plan_workers(
            argv,
            hosts=hosts,
            threads=threads,
            env=quiet,
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


def own_interface(network) -> bool:
    """Whether every worker has a network namespace, and so an `eth0`, of
    its own (then its interface counters are its traffic)."""
    if isinstance(network, EmulatedHosts):
        return FLAGS.workers == len(network.names)
    return network is not None


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
            f"--interface_counters={own_interface(network)}",
            *config_flags.worker_argv(FLAGS),
        ]
        commands = worker_commands(argv, FLAGS.workers, FLAGS.threads, network)
        group = WorkerGroup(commands, preload=_PRELOADER)
        code = group.run(timeout=FLAGS.timeout)
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


def emulated_network(spec: netem.NetemSpec | None):
    """The network of the run: `--emulated_hosts` namespaces with sshd, or
    one namespace per worker. `spec` limits every link (`None`: no limit)."""
    if FLAGS.emulated_hosts:
        names = [f"host{i}" for i in range(FLAGS.emulated_hosts)]
        return EmulatedHosts(
            names,
            None if spec is None else spec.rate,
            tbf_queue_ms=FLAGS.tbf_queue_ms,
        )
    return netem.EmulatedNetwork(
        FLAGS.workers, spec, tbf_queue_ms=FLAGS.tbf_queue_ms
    )


def check_flags() -> tuple[list[modes.Mode], netem.NetemSpec | None]:
    """The chosen modes and the `--netem` link; raises `ValueError`."""
    chosen = modes.resolve(FLAGS.modes)
    config_flags.config_from_flags(FLAGS)
    spec = netem.parse(FLAGS.netem) if FLAGS.netem else None
    if any(m.hot_rows for m in chosen) and not FLAGS.hot_rows:
        raise ValueError(
            "Mode hybrid_hot needs `--hot_rows` > 0 (rows per table). "
            "Received: --hot_rows=0"
        )
    if FLAGS.emulated_hosts and FLAGS.workers % FLAGS.emulated_hosts:
        raise ValueError(
            "`--workers` must be a multiple of `--emulated_hosts`. Received: "
            f"--workers={FLAGS.workers} --emulated_hosts={FLAGS.emulated_hosts}"
        )
    if FLAGS.target_step_ms:
        if spec is not None:
            raise ValueError(
                "`--target_step_ms` sets the link rate itself and cannot be "
                f"combined with --netem. Received: --netem={FLAGS.netem}. "
                "Drop one of them."
            )
        netem.parse(f"{FLAGS.target_bandwidth}:0")
        modes.get(FLAGS.calibration_mode)
    return chosen, spec


def _measure(chosen, spec):
    """Runs the calibration (with `--target_step_ms`) and every mode;
    returns `(results, link spec, scaling)`."""
    scaling = None
    if FLAGS.target_step_ms:
        calibration_mode = modes.get(FLAGS.calibration_mode)
        with emulated_network(None) as network:
            logging.info(
                "calibration: %s with unlimited links",
                calibration_mode.name,
            )
            calibration = [
                run_mode(calibration_mode, network, 0)
                for _ in range(FLAGS.repeats)
            ]
        spec, scaling = target_cluster.scaled_link(
            calibration,
            FLAGS.target_bandwidth,
            FLAGS.target_step_ms,
            FLAGS.calibration_mode,
        )
        logging.info("network scaling: %s", json.dumps(scaling))
    if spec is None and not FLAGS.emulated_hosts:
        measured = run_all(chosen, None)
    else:
        with emulated_network(spec) as network:
            measured = run_all(chosen, network)
    return measured, spec, scaling


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        chosen, spec = check_flags()
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    except RuntimeError as error:  # A mode that cannot run here.
        logging.error("%s", error)
        sys.exit(1)
    try:
        measured, spec, scaling = _measure(chosen, spec)
    except (PermissionError, RuntimeError, FileNotFoundError) as error:
        logging.error("%s", error)
        sys.exit(1)
    finally:
        _PRELOADER.close()
    report = {
        "workload": FLAGS.workload,
        "workers": FLAGS.workers,
        "emulated_hosts": FLAGS.emulated_hosts,
        "netem": FLAGS.netem or (str(spec) if spec else None),
        "tbf_queue_ms": FLAGS.tbf_queue_ms if spec else None,
        "tbf_limit_bytes": (
            netem.tbf_limit_bytes(spec.bits_per_second, FLAGS.tbf_queue_ms)
            if spec
            else None
        ),
        "scaling": scaling,
        "steps": FLAGS.steps,
        "repeats": FLAGS.repeats,
        "results": measured,
    }
    if scaling:
        report["target"] = target_cluster.against_target(measured, scaling)
    logging.info("results:\n%s", results.table(measured))
    versus = results.comparison(measured)
    if versus:
        logging.info("against allgather, side by side:\n%s", versus)
    hierarchical = results.hierarchical_comparison(measured)
    if hierarchical:
        logging.info("cross-host sparse traffic:\n%s", hierarchical)
    if scaling:
        logging.info(
            "against the target cluster (communication's share of a step; "
            "speed-up measured and allowed by bytes alone):\n%s",
            target_cluster.target_table(report["target"]),
        )
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as f:
            json.dump(report, f, indent=1)
        logging.info("wrote %s", FLAGS.output_json)
    if FLAGS.plot:
        results.plot(report, FLAGS.plot)
        logging.info("wrote %s", FLAGS.plot)


if __name__ == "__main__":
    help_first.run(main)
