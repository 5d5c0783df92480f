"""DynamicEmbedding next to a static Embedding on 1, 2 and 4 workers, side
by side in one run.

Launches `main.py` on N workers for each N of `--workers` (one launch
each, through `keras_hybrid.launch.launch`, what `keras-hybrid-run -np N`
runs; every launch times the three models on the same global batches) and
prints, per worker count: ms per step of each model (the static table
holds the dynamic one's capacity on all workers, the `live` one only the
rows the dynamic table filled), the dynamic model's ratio to each,
lookups per second per worker, and each worker's resident memory after
each model (the largest over the workers).

    python -m examples.dynamic_embedding.scaling
    python -m examples.dynamic_embedding.scaling --workers=1,2 --steps=50

`--out` writes every rank's report as JSON.
"""

import glob
import json
import os
import sys
import tempfile

from absl import app
from absl import flags
from absl import logging

from keras_hybrid.launch import launch
from keras_hybrid.launch.worker_streams import OutputSettings

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "main.py")
PASSED = ("steps", "warmup_steps", "batch_size", "capacity", "admit_after")

FLAGS = flags.FLAGS
flags.DEFINE_list("workers", ["1", "2", "4"], "Worker counts to launch.")
flags.DEFINE_integer("steps", 100, "Timed steps per model.")
flags.DEFINE_integer("warmup_steps", 10, "Untimed steps first.")
flags.DEFINE_integer("batch_size", 256, "Samples per step and worker.")
flags.DEFINE_integer("capacity", 100_000, "Dynamic table rows per worker.")
flags.DEFINE_integer("admit_after", 2, "Steps that see a key before a row.")
flags.DEFINE_integer("threads", 1, "TF threads per worker.")
flags.DEFINE_float("timeout", 1800, "Seconds each launch may take.")
flags.DEFINE_string("out", None, "Where to write every rank's report.")


def run(num_workers: int, directory: str) -> list:
    """Every rank's report of one launch on `num_workers`."""
    report = os.path.join(directory, f"np{num_workers}.json")
    code = launch(
        [sys.executable, MAIN, f"--report={report}"]
        + [f"--{name}={getattr(FLAGS, name)}" for name in PASSED],
        num_workers,
        threads=FLAGS.threads,
        env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=FLAGS.timeout,
        output=OutputSettings(quiet_tf_banners=True),
    )
    if code:
        raise RuntimeError(
            f"{num_workers} workers exited {code} (their output is above)."
        )
    reports = []
    for path in [report] + sorted(glob.glob(f"{report}.rank*")):
        with open(path) as f:
            reports.append(json.load(f))
    if len(reports) != num_workers:
        raise RuntimeError(
            f"{num_workers} workers wrote {len(reports)} reports."
        )
    return reports


def table(runs: dict) -> str:
    lines = [
        f"{'workers':>7} {'static ms':>10} {'dynamic ms':>11} {'ratio':>6} "
        f"{'live rows':>10} {'live ms':>8} {'ratio':>6} "
        f"{'lookups/s/worker':>17} {'static MB':>10} {'dynamic MB':>11}"
    ]
    for num_workers, reports in runs.items():
        first = reports[0]
        peak = {
            name: max(r[name]["resident_mb_after"] for r in reports)
            for name in ("static", "dynamic")
        }
        lines.append(
            f"{num_workers:>7} {first['static']['ms_per_step']:>10.2f} "
            f"{first['dynamic']['ms_per_step']:>11.2f} "
            f"{first['ratio']:>6.2f} "
            f"{first['static_live_rows']:>10} "
            f"{first['static_live']['ms_per_step']:>8.2f} "
            f"{first['ratio_live']:>6.2f} "
            f"{first['dynamic']['lookups_per_second_per_worker']:>17.0f} "
            f"{peak['static']:>10.0f} {peak['dynamic']:>11.0f}"
        )
    return "\n".join(lines)


def main(argv) -> None:
    del argv
    counts = [int(n) for n in FLAGS.workers]
    if any(n < 1 for n in counts):
        raise app.UsageError(f"--workers must be >= 1. Received: {counts}")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="dynamic_scaling_") as directory:
        for i, num_workers in enumerate(counts):
            logging.info(
                "launch %d of %d: %d workers, %d steps per model",
                i + 1,
                len(counts),
                num_workers,
                FLAGS.steps + FLAGS.warmup_steps,
            )
            runs[num_workers] = run(num_workers, directory)
            logging.info(
                "%d workers: dynamic / static %.2f, / live-row static %.2f",
                num_workers,
                runs[num_workers][0]["ratio"],
                runs[num_workers][0]["ratio_live"],
            )
    print(table(runs))
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump({str(n): r for n, r in runs.items()}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
