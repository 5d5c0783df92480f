"""`python -m keras_hybrid.simulate`: predicted cost of every mode at scale.

    python -m keras_hybrid.simulate --workload=lm --vocab=20000 \\
        --workers=8,16,32,64,128,256 --accelerators_per_host=8 \\
        --bandwidth=10gbit --latency=50us --out_dir=sim_out

Profiles the benchmark's `--workload` in this process (the workload flags
are the benchmark's; `--warmup_steps` and `--steps` are the untimed and
timed steps per batch size) and writes `profile.json` to `--out_dir`, or
reads a profile written before with `--profile`. It then predicts bytes
and time per step of hybrid, PS-only, all-reduce and all-gather at each
worker count (`--batch_per_worker` samples per worker), and prints two
tables (throughput and speed-up; communication ms and MB
per worker). With `--out_dir` it also writes `simulation.json` and
`simulation.png`. With `--measured`, it compares its predictions with
benchmark JSON files (`python -m keras_hybrid.benchmark`).
"""

import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from keras_hybrid.benchmark import config_flags
from keras_hybrid.simulate import cluster_spec
from keras_hybrid.simulate import cost_model
from keras_hybrid.simulate import report
from keras_hybrid.simulate import traffic
from keras_hybrid.simulate import validate
from keras_hybrid.simulate.profile import Profile

FLAGS = flags.FLAGS
config_flags.define_flags()
flags.DEFINE_string(
    "profile",
    None,
    "Profile JSON to simulate; if unset, --workload is profiled.",
)
flags.DEFINE_list(
    "workers", ["8", "16", "32", "64", "128", "256"], "Worker counts."
)
flags.DEFINE_integer(
    "accelerators_per_host", 8, "Workers per host.", lower_bound=1
)
flags.DEFINE_string("bandwidth", "10gbit", "Host interface rate (tc units).")
flags.DEFINE_string("latency", "50us", "Latency between hosts (tc units).")
flags.DEFINE_string(
    "intra_bandwidth", "80gbit", "Rate between workers of one host."
)
flags.DEFINE_string("intra_latency", "5us", "Latency inside a host.")
flags.DEFINE_integer(
    "bucket_bytes",
    traffic.DEFAULT_BUCKET_BYTES,
    "Fusion bucket of dense all-reduces (as HybridStrategy's).",
    lower_bound=1,
)
flags.DEFINE_list("modes", list(traffic.MODES), "Modes to simulate.")
flags.DEFINE_list(
    "measured",
    [],
    "Benchmark JSON files to validate against (same workload and batch).",
)
flags.DEFINE_list(
    "baseline",
    [],
    "Benchmark JSON files of the same runs without network emulation (one "
    "per worker count); their step times are the compute time of the "
    "validation.",
)
flags.DEFINE_string("out_dir", "", "If set, write JSON and PNG here.")


def _out(text: str) -> None:
    """The command's report goes to stdout (it is what the user asked for);
    progress goes to the absl log."""
    sys.stdout.write(text + "\n")


def _spec(workers: int) -> cluster_spec.ClusterSpec:
    return cluster_spec.ClusterSpec(
        workers=workers,
        accelerators_per_host=min(FLAGS.accelerators_per_host, workers),
        inter_bandwidth=cluster_spec.parse_rate(FLAGS.bandwidth),
        inter_latency=cluster_spec.parse_time(FLAGS.latency),
        intra_bandwidth=cluster_spec.parse_rate(FLAGS.intra_bandwidth),
        intra_latency=cluster_spec.parse_time(FLAGS.intra_latency),
    )


def _worker_counts() -> list[int]:
    try:
        counts = [int(n) for n in FLAGS.workers]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise app.UsageError(
            "`--workers` must be a list of ints >= 1. Received: "
            f"--workers={','.join(FLAGS.workers)}"
        )
    return counts


def _check_modes() -> list[str]:
    bad = [m for m in FLAGS.modes if m not in traffic.MODES]
    if bad or not FLAGS.modes:
        raise app.UsageError(
            f"`--modes` must be a list of {traffic.MODES}. Received: "
            f"--modes={','.join(FLAGS.modes)}"
        )
    return list(FLAGS.modes)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    modes = _check_modes()
    try:
        specs = [_spec(n) for n in _worker_counts()]
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    profile = _profile()
    batch = FLAGS.batch_per_worker
    predictions = []
    for spec in specs:
        logging.info("Simulating %d workers", spec.workers)
        for mode in modes:
            predictions.append(
                cost_model.predict(
                    profile, mode, spec, batch, bucket_bytes=FLAGS.bucket_bytes
                )
            )
    _out(
        f"Predicted per step: {profile.name}, {batch} samples per worker, "
        f"{FLAGS.accelerators_per_host} workers per host, host link "
        f"{FLAGS.bandwidth} / {FLAGS.latency}, in-host link "
        f"{FLAGS.intra_bandwidth} / {FLAGS.intra_latency}.\n"
    )
    _out("Throughput (samples/s) and speed-up of hybrid:")
    _out(report.comparison_table(predictions))
    _out("\nCommunication per step: ms, and MB sent per worker:")
    _out(report.cost_table(predictions))
    checks = _validation(profile, batch)
    if FLAGS.out_dir:
        _write(profile, predictions, checks)


def _profile() -> Profile:
    if FLAGS.profile:
        with open(FLAGS.profile) as f:
            return Profile.from_json(f.read())
    from keras_hybrid.simulate import workload_profile

    try:
        config = config_flags.config_from_flags(FLAGS)
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    profile = workload_profile.profile_workload(
        FLAGS.workload, config, FLAGS.warmup_steps, FLAGS.steps
    )
    if FLAGS.out_dir:
        os.makedirs(FLAGS.out_dir, exist_ok=True)
        path = os.path.join(FLAGS.out_dir, "profile.json")
        with open(path, "w") as f:
            f.write(profile.to_json())
        logging.info("Wrote %s", path)
    return profile


def _validation(profile, batch) -> list:
    if not FLAGS.measured:
        return []
    baselines = {}
    for path in FLAGS.baseline:
        body = validate.load_benchmark(path)
        baselines[body["workers"]] = body
    checks = []
    for path in FLAGS.measured:
        measured = validate.load_benchmark(path)
        checks += validate.compare(
            profile,
            measured,
            batch,
            baselines.get(measured["workers"]),
            FLAGS.bucket_bytes,
        )
    _out("\nPredicted against measured (error = predicted / measured - 1):")
    _out(validate.table(checks))
    return checks


def _write(profile, predictions, checks) -> None:
    os.makedirs(FLAGS.out_dir, exist_ok=True)
    body = {
        "profile": profile.name,
        "flags": {
            k: FLAGS[k].value
            for k in (
                "workers",
                "accelerators_per_host",
                "bandwidth",
                "latency",
                "intra_bandwidth",
                "intra_latency",
                "batch_per_worker",
                "bucket_bytes",
            )
        },
        "predictions": [p.to_dict() for p in predictions],
        "validation": checks,
    }
    with open(os.path.join(FLAGS.out_dir, "simulation.json"), "w") as f:
        json.dump(body, f, indent=1)
    png = os.path.join(FLAGS.out_dir, "simulation.png")
    report.plot(predictions, png, title=profile.name)
    logging.info("Wrote %s and simulation.json", png)


if __name__ == "__main__":
    app.run(main)
