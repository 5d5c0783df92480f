"""The fault-injection soak: random elastic jobs, each losing one or two
workers by SIGKILL at a random moment, each judged against the
uninterrupted run.

```sh
python -m keras_hybrid.testing.soak --runs=30 --seed=1 --out=soak.json
```

Prints one line per run and the counts of outcomes (`runner`: survived,
clean error, other); exits 1 if any run ended otherwise. `make soak` runs
it with the defaults.
"""

import json
import os
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

from keras_hybrid.testing.soak import runner
from keras_hybrid.testing.soak.scenario import draw

FLAGS = flags.FLAGS
flags.DEFINE_integer("runs", 30, "Random runs.")
flags.DEFINE_integer("seed", 1, "Seed of the scenarios.")
flags.DEFINE_float("timeout", 240.0, "Seconds one run may take.")
flags.DEFINE_string("out", None, "A JSON report of every run.")
flags.DEFINE_string("keep", None, "Keep the runs' folders here.")


def soak(runs: int, seed: int, timeout: float, root: str) -> list:
    """Draws and runs `runs` scenarios from `seed` in `root`; returns
    their records."""
    rng = np.random.default_rng(seed)
    cache, records = {}, []
    for i in range(runs):
        scenario = draw(rng, f"run-{i:03d}")
        record = runner.run_scenario(scenario, root, timeout, cache)
        records.append(record)
        print(
            f"{scenario.name} {record['outcome']:<11} {record['seconds']:6.1f}"
            f" s  {scenario.describe()}: {record['why']}",
            flush=True,
        )
    return records


def main(argv):
    del argv
    start = time.monotonic()
    if FLAGS.keep:
        os.makedirs(FLAGS.keep, exist_ok=True)
        records = soak(FLAGS.runs, FLAGS.seed, FLAGS.timeout, FLAGS.keep)
    else:
        with tempfile.TemporaryDirectory() as root:
            records = soak(FLAGS.runs, FLAGS.seed, FLAGS.timeout, root)
    counts = {
        o: sum(r["outcome"] == o for r in records)
        for o in ("survived", "clean error", "other")
    }
    print(
        f"{len(records)} runs in {time.monotonic() - start:.0f} s: "
        + ", ".join(f"{n} {o}" for o, n in counts.items()),
        flush=True,
    )
    if FLAGS.out:
        with open(FLAGS.out, "w") as f:
            json.dump({"counts": counts, "runs": records}, f, indent=1)
    return 1 if counts["other"] else 0


if __name__ == "__main__":
    app.run(main)
