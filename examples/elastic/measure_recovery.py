"""Measures the stall of losing task 0 (the collective leader) against
losing another worker, and against a cold restart, in one run.

```sh
python -m examples.elastic.measure_recovery --hidden=512 --vocab=50000 \\
    --embedding_dim=64 --repeats=3
```

Each round runs the plain `fit` script `main.py` on 3 elastic workers at
the default commit interval (10) twice, in turns: the worker of rank 0
(task 0) SIGKILLs itself at the end of global step `--die_at_step`, or
the worker of rank 2 does (the discovery output then drops to 2 slots).
The stall is what `ElasticRecovery` records on rank 0 of the survivors
(reason `lost_worker`): from the end of the last good step to the end of
the first replayed step, minus a normal step; it is split into the
failure seen, the recovery itself (new context and server, under a new
leader after task 0), and `fit` starting again (its step traced again,
the batches before the commit drawn, the first replayed step). Then a
cold restart 3 -> 2 of the same model (`measure_resize.measure_cold`: a
sharded save after the last step, the job's end, a new launch of 2
workers that restores and runs its first step).
"""

import json
import os
import statistics
import tempfile

from absl import app
from absl import flags

from examples.elastic import commit_runs
from examples.elastic import measure_resize

FLAGS = flags.FLAGS
flags.DEFINE_integer("die_at_step", 95, "Global step at whose end one dies.")
flags.DEFINE_integer("repeats", 3, "Rounds (each loses rank 0, then 2).")
flags.DEFINE_string("store", "directory", "The commit store.")


def measure_loss(tmp: str, name: str, rank: int) -> dict:
    """One 3-worker run in which the worker of `rank` dies."""

    def on_line(line, slots_file):
        if "exited with code -9" in line:
            with open(slots_file + ".tmp", "w") as f:
                f.write("localhost:2\n")
            os.replace(slots_file + ".tmp", slots_file)

    report, _ = commit_runs.launch(
        tmp,
        name,
        3,
        [
            *("--threads", str(FLAGS.threads)),
            *("--min-np", "2", "--max-np", "3", "--commit-store", FLAGS.store),
        ],
        [
            f"--hidden={FLAGS.hidden}",
            f"--vocab={FLAGS.vocab}",
            f"--embedding_dim={FLAGS.embedding_dim}",
            f"--num_samples={96 * 150}",
            f"--die_at_step={FLAGS.die_at_step}",
            f"--die_rank={rank}",
        ],
        on_line=on_line,
        timeout=FLAGS.timeout,
    )
    (event,) = [r for r in report["resizes"] if r["reason"] == "lost_worker"]
    return {
        "lost_rank": rank,
        "lost_tasks": event["left"],
        "resumed_from_global_step": event["global_step"],
        "stall_seconds": event["stall_seconds"],
        "failure_seen_after_seconds": event["detect_seconds"],
        "recovery_seconds": event["switch_seconds"],
        "fit_restart_and_first_step_seconds": event["gap_seconds"]
        - event["detect_seconds"]
        - event["switch_seconds"],
        "normal_step_seconds": event["normal_step_seconds"],
    }


def main(argv):
    del argv
    runs = {0: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(FLAGS.repeats):
            for rank in (0, 2) if r % 2 == 0 else (2, 0):
                runs[rank].append(measure_loss(tmp, f"lost-{rank}-{r}", rank))
                print(json.dumps(runs[rank][-1]), flush=True)
        cold = measure_resize.measure_cold(tmp, before=3, after=2)
    print(json.dumps({"cold_restart": cold}), flush=True)
    restart = cold["cold_restart_seconds"]
    print(f"cold restart 3 -> 2: {restart:.2f} s")
    for rank, name in ((0, "task 0 (the leader)"), (2, "rank 2")):
        stalls = [run["stall_seconds"] for run in runs[rank]]
        parts = [
            statistics.median(run[k] for run in runs[rank])
            for k in (
                "failure_seen_after_seconds",
                "recovery_seconds",
                "fit_restart_and_first_step_seconds",
            )
        ]
        print(
            f"lost {name}: stall median {statistics.median(stalls):.2f} s "
            f"[{min(stalls):.2f}, {max(stalls):.2f}] over {len(stalls)} "
            f"runs (seen {parts[0]:.2f} s, recovery {parts[1]:.2f} s, fit "
            f"restart {parts[2]:.2f} s); "
            f"{statistics.median(stalls) / restart:.3f} of the cold restart"
        )


if __name__ == "__main__":
    app.run(main)
