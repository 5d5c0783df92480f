"""Measures what surviving a lost worker costs: the in-memory commits
during normal training, and the stall of a recovery, in one run.

```sh
python examples/elastic/measure_commit.py --hidden=512
python examples/elastic/measure_commit.py --hidden=512 --vocab=50000 \
    --embedding_dim=64
```

1. Commit cost, side by side for each store of `--stores` (`--commit-store`
   directory, the default on one host; served, the default on several
   hosts, here on one; and buddy): the plain `fit` script
   `main.py` on 2 elastic workers with `--commit-interval 1` (a commit
   after every step), at the default interval (10), and once with commits
   off in practice (`--commit-interval 1000000`). The difference of the
   median steps of the first and the last is one commit; each chief also
   logs its own commit time. The cost at the default interval is one commit over
   `interval` median steps (the issue's target: at most 10%); the run at
   the default interval gives it directly too, as the difference of its
   mean step and that of the run without commits. With `--vocab` the
   model has a partitioned `Embedding(vocab, embedding_dim)` (Adam), whose
   rows and slots each commit copies, then writes to a file or uploads to
   the launcher in the background (`strategy/elastic_store.py`), or sends
   to the next worker as a buddy copy (`strategy/elastic_buddy.py`). The
   logged commit time of the directory and served stores leaves out the
   background write (not the wait for the previous one); the side-by-side
   and direct shares include its cost to the steps.
2. Recovery (with `--recovery_store`, by default the first of
   `--stores`): 3 workers at the default interval; the worker of rank 2
   SIGKILLs itself at global step `--die_at_step` (the discovery output then
   drops to 2 slots). The stall is the gap between the last good step and
   the end of the first replayed step on rank 0, as recorded in its
   `CommunicationStats` resizes (reason `lost_worker`); the replayed
   steps are those between the last commit and the death.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from absl import app
from absl import flags

from keras_hybrid.launch.elastic_files import DEFAULT_COMMIT_INTERVAL

FLAGS = flags.FLAGS
flags.DEFINE_integer("hidden", 512, "Width of the model's hidden layers.")
flags.DEFINE_integer("threads", 1, "Threads per worker.")
flags.DEFINE_integer("steps", 150, "Steps of each training run.")
flags.DEFINE_integer(
    "die_at_step", 95, "Global step (the job's) at whose end rank 2 dies."
)
flags.DEFINE_integer("vocab", 0, "Rows of a partitioned table (0: none).")
flags.DEFINE_integer("embedding_dim", 64, "Width of the table's rows.")
flags.DEFINE_float("timeout", 900, "Seconds for each launch.")
flags.DEFINE_list(
    "stores",
    ["directory", "served", "buddy"],
    "Commit stores to measure side by side (`--commit-store`).",
)
flags.DEFINE_string(
    "recovery_store",
    None,
    "The commit store of the recovery run. Default: the first of --stores.",
)
flags.DEFINE_bool("recovery", True, "Also measure a recovery's stall.")

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "main.py")
RUN = [sys.executable, "-m", "keras_hybrid.run"]
_COMMIT_LOG = re.compile(
    r"task 0 committed (\d+) times .*median ([0-9.]+) s each, every (\d+) "
    r"steps; median step ([0-9.]+) s.*?(\d+) bytes of buddy rows"
)


def _launch(
    tmp: str, name: str, slots: int, args: list, worker_args=(), on_line=None
):
    slots_file = os.path.join(tmp, f"{name}.slots")
    script = os.path.join(tmp, f"{name}.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {slots_file}\n")
    os.chmod(script, 0o755)
    with open(slots_file, "w") as f:
        f.write(f"localhost:{slots}\n")
    report = os.path.join(tmp, f"{name}.json")
    proc = subprocess.Popen(
        [
            *RUN,
            *("--threads", str(FLAGS.threads)),
            *("--host-discovery-script", script),
            *("--discovery-interval", "0.5"),
            *args,
            sys.executable,
            TRAIN,
            f"--hidden={FLAGS.hidden}",
            f"--vocab={FLAGS.vocab}",
            f"--embedding_dim={FLAGS.embedding_dim}",
            "--epochs=1",
            "--batch_size=96",
            f"--num_samples={96 * FLAGS.steps}",
            f"--report={report}",
            *worker_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    lines = []

    def read():
        for line in iter(proc.stdout.readline, ""):
            lines.append(line)
            if on_line is not None:
                on_line(line, slots_file)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait(timeout=FLAGS.timeout)
    reader.join(timeout=10)
    if code != 0:
        raise RuntimeError(f"{name} exited {code}:\n" + "".join(lines[-80:]))
    with open(report) as f:
        return json.load(f), "".join(lines)


def _median_step(report: dict) -> float:
    ends = np.asarray(report["step_ends"])
    # Leave out the first steps (tracing, warm-up).
    return float(np.median(np.diff(ends[5:])))


def _mean_step(report: dict) -> float:
    ends = np.asarray(report["step_ends"])
    return float(np.mean(np.diff(ends[5:])))


def _commit_log(output: str) -> dict:
    match = _COMMIT_LOG.search(output)
    if match is None:
        raise RuntimeError("The chief logged no commit summary.")
    commits, seconds, interval, step, sent = match.groups()
    return {
        "commits": int(commits),
        "commit_seconds": float(seconds),
        "interval": int(interval),
        "median_step": float(step),
        "buddy_bytes_per_commit": int(sent) // max(1, int(commits)),
    }


def measure_no_commits(tmp: str) -> dict:
    """The run with commits off in practice (the baseline of each store)."""
    never, _ = _launch(
        tmp, "never", 2, ["--min-np", "2", "--commit-interval", "1000000"]
    )
    return never


def measure_commit_cost(tmp: str, store: str, never: dict) -> dict:
    """One store's commit cost, against the run without commits."""
    flags_ = ["--min-np", "2", "--commit-store", store]
    every, every_log = _launch(
        tmp, f"every-{store}", 2, [*flags_, "--commit-interval", "1"]
    )
    default, _ = _launch(
        tmp,
        f"default-{store}",
        2,
        [*flags_, "--commit-interval", str(DEFAULT_COMMIT_INTERVAL)],
    )
    step_every, step_never = _median_step(every), _median_step(never)
    logged = _commit_log(every_log)
    per_commit = max(0.0, step_every - step_never)
    mean_default, mean_never = _mean_step(default), _mean_step(never)
    return {
        "store": store,
        "median_step_commit_every_step": step_every,
        "median_step_no_commits": step_never,
        "mean_step_default_interval": mean_default,
        "mean_step_no_commits": mean_never,
        "share_at_default_direct": mean_default / mean_never - 1.0,
        "buddy_bytes_per_commit": logged["buddy_bytes_per_commit"],
        "commit_seconds_side_by_side": per_commit,
        "commit_seconds_logged": logged["commit_seconds"],
        "default_interval": DEFAULT_COMMIT_INTERVAL,
        "share_at_default_side_by_side": per_commit
        / (DEFAULT_COMMIT_INTERVAL * step_never),
        "share_at_default_logged": logged["commit_seconds"]
        / (DEFAULT_COMMIT_INTERVAL * step_never),
    }


def measure_recovery(tmp: str) -> dict:
    store = FLAGS.recovery_store or FLAGS.stores[0]

    def on_line(line, slots_file):
        if "exited with code -9" in line:
            with open(slots_file + ".tmp", "w") as f:
                f.write("localhost:2\n")
            os.replace(slots_file + ".tmp", slots_file)

    start = time.monotonic()
    report, output = _launch(
        tmp,
        "lost",
        3,
        ["--min-np", "2", "--max-np", "3", "--commit-store", store],
        worker_args=[f"--die_at_step={FLAGS.die_at_step}"],
        on_line=on_line,
    )
    events = [r for r in report["resizes"] if r["reason"] == "lost_worker"]
    if len(events) != 1:
        raise RuntimeError(f"Expected one recovery; rank 0 recorded {events}")
    (event,) = events
    logged = _commit_log(output)
    return {
        "wall_seconds": time.monotonic() - start,
        "store": store,
        "died_at_step": FLAGS.die_at_step,
        "resumed_from_global_step": event["global_step"],
        "replayed_steps": FLAGS.die_at_step - event["global_step"],
        "table_bytes_rebalanced": event.get("table_bytes", 0),
        "failure_seen_after_seconds": event["detect_seconds"],
        "recovery_seconds": event["switch_seconds"],
        "fit_restart_and_first_step_seconds": event["gap_seconds"]
        - event["detect_seconds"]
        - event["switch_seconds"],
        "last_good_to_first_replayed_step_seconds": event["gap_seconds"],
        "normal_step_seconds": event["normal_step_seconds"],
        "stall_seconds": event["stall_seconds"],
        "commit_seconds_logged": logged["commit_seconds"],
        "share_at_default_logged": logged["commit_seconds"]
        / (logged["interval"] * logged["median_step"]),
    }


def _print_side_by_side(costs: list) -> None:
    print("store      commit s (logged)  share@10 side-by-side  direct")
    for c in costs:
        print(
            f"{c['store']:<10} {c['commit_seconds_logged']:>17.4f}  "
            f"{100 * c['share_at_default_side_by_side']:>20.1f}%  "
            f"{100 * c['share_at_default_direct']:>5.1f}%",
            flush=True,
        )


def main(argv):
    del argv
    with tempfile.TemporaryDirectory() as tmp:
        never = measure_no_commits(tmp)
        costs = [measure_commit_cost(tmp, s, never) for s in FLAGS.stores]
        print(json.dumps({"commit_cost": costs}, indent=2), flush=True)
        _print_side_by_side(costs)
        if not FLAGS.recovery:
            return
        recovery = measure_recovery(tmp)
        print(json.dumps({"recovery": recovery}, indent=2), flush=True)


if __name__ == "__main__":
    app.run(main)
