"""Measures the stall of a planned grow (2 -> 4) and shrink (4 -> 3) and
compares it with a cold restart of the same model, in one run.

```sh
python examples/elastic/measure_resize.py --hidden=512
```

Stall of a resize: the gap between the train steps around it minus a
normal step, as `ElasticResize` records it on rank 0. Cold restart: a
2-worker job saves a sharded checkpoint after its last step and exits; a
4-worker job is launched, restores it and runs its first step. The cold
restart costs save + stop + (launch to the end of the first step) minus
a normal step. The targets: grow stall <= 1/6 of the cold restart,
shrink stall <= 2 s. It also compares the median step of 2 fixed workers
with 2 elastic members, which agree on the next plan after every step
(`--overhead=false` skips that).

With a partitioned table (`--vocab=50000 --embedding_dim=64`) it also
reports the table's bytes at each resize: the row bytes moved (table and
Adam's two slots), the least any balanced re-partition moves, the bytes
the TF engine's all-to-all put on the wire (padding included), and
`keras_hybrid.costs.resize`'s prediction of each, which is also given
for 3 -> 4 and 8 -> 7 (the 1.1x bound).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags

from keras_hybrid.costs import resize

FLAGS = flags.FLAGS
flags.DEFINE_integer("hidden", 512, "Width of the model's hidden layers.")
flags.DEFINE_integer("threads", 1, "Threads per worker.")
flags.DEFINE_float("timeout", 900, "Seconds for each launch.")
flags.DEFINE_integer("vocab", 0, "Rows of a partitioned table (0: none).")
flags.DEFINE_integer("embedding_dim", 64, "Width of the table's rows.")
flags.DEFINE_boolean("overhead", True, "Measure fixed vs elastic steps.")

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "main.py")
RUN = [sys.executable, "-m", "keras_hybrid.run"]


def _model_flags() -> list:
    return [
        f"--hidden={FLAGS.hidden}",
        f"--vocab={FLAGS.vocab}",
        f"--embedding_dim={FLAGS.embedding_dim}",
    ]


def _launch(args, env=None):
    proc = subprocess.Popen(
        [*RUN, "--threads", str(FLAGS.threads), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
    )
    lines = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")),
        daemon=True,
    )
    reader.start()
    return proc, lines, reader


def _wait_for(lines, text, count, proc, deadline):
    while sum(text in line for line in lines) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"never saw {text!r} x{count}:\n" + "".join(lines[-60:])
            )
        time.sleep(0.1)


def measure_elastic(tmp: str) -> dict:
    slots = os.path.join(tmp, "slots")
    script = os.path.join(tmp, "hosts.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {slots}\n")
    os.chmod(script, 0o755)
    with open(slots, "w") as f:
        f.write("localhost:2\n")
    report = os.path.join(tmp, "elastic.json")
    open(f"{report}.pace", "w").close()
    proc, lines, reader = _launch(
        [
            *("--min-np", "2", "--max-np", "4"),
            *("--host-discovery-script", script),
            *("--discovery-interval", "0.2"),
            sys.executable,
            TRAIN,
            *_model_flags(),
            "--epochs=4",
            "--step_sleep=0.2",
            f"--report={report}",
        ]
    )
    deadline = time.monotonic() + FLAGS.timeout
    _wait_for(lines, "rank 0 of 2", 1, proc, deadline)
    with open(slots, "w") as f:
        f.write("localhost:4\n")
    _wait_for(lines, "resize at global step", 2, proc, deadline)  # 2 ranks
    time.sleep(3)
    with open(slots, "w") as f:
        f.write("localhost:3\n")
    _wait_for(lines, "resize at global step", 5, proc, deadline)  # 3 ranks
    os.remove(f"{report}.pace")
    proc.wait(timeout=FLAGS.timeout)
    reader.join(timeout=10)
    if proc.returncode != 0:
        raise RuntimeError("elastic run failed:\n" + "".join(lines[-80:]))
    with open(report) as f:
        return json.load(f)


def measure_cold(tmp: str, before: int = 2, after: int = 4) -> dict:
    """A cold restart from `before` workers to `after`: a sharded save
    after the last step, the job's end, a new launch that restores and
    runs its first step."""
    ckpt = os.path.join(tmp, f"ckpt-{before}-{after}")
    first = os.path.join(tmp, f"first-{before}-{after}.json")
    proc, lines, reader = _launch(
        [
            *("-np", str(before), sys.executable, TRAIN),
            *_model_flags(),
            *("--epochs=1", "--steps_per_epoch=20"),
            f"--save_to={ckpt}",
            f"--report={first}",
        ]
    )
    proc.wait(timeout=FLAGS.timeout)
    exited = time.time()
    reader.join(timeout=10)
    if proc.returncode != 0:
        raise RuntimeError("save run failed:\n" + "".join(lines[-80:]))
    with open(first) as f:
        saved = json.load(f)
    second = os.path.join(tmp, f"second-{before}-{after}.json")
    launched = time.time()
    proc, lines, reader = _launch(
        [
            *("-np", str(after), sys.executable, TRAIN),
            *_model_flags(),
            *("--epochs=1", "--steps_per_epoch=20"),
            f"--restore_from={ckpt}",
            f"--report={second}",
        ]
    )
    proc.wait(timeout=FLAGS.timeout)
    reader.join(timeout=10)
    if proc.returncode != 0:
        raise RuntimeError("restore run failed:\n" + "".join(lines[-80:]))
    with open(second) as f:
        restored = json.load(f)
    ends = restored["step_ends"]
    gaps = sorted(b - a for a, b in zip(ends[1:], ends[2:], strict=False))
    normal = gaps[len(gaps) // 2]
    return {
        "save_seconds": saved["save_seconds"],
        "stop_seconds": exited - saved["saved_at"],
        "launch_to_first_step_seconds": ends[0] - launched,
        "restore_done_after_launch_seconds": restored["restored"] - launched,
        "normal_step_seconds": normal,
        "cold_restart_seconds": saved["save_seconds"]
        + (exited - saved["saved_at"])
        + (ends[0] - launched)
        - normal,
    }


def _median_step(report: str) -> float:
    with open(report) as f:
        ends = json.load(f)["step_ends"]
    gaps = sorted(b - a for a, b in zip(ends[1:], ends[2:], strict=False))
    return gaps[len(gaps) // 2]


def measure_decision_overhead(tmp: str) -> dict:
    """Median step of 2 fixed workers vs 2 elastic members (which agree on
    the next plan after every step): the per-step cost of being elastic."""
    script = os.path.join(tmp, "two.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho localhost:2\n")
    os.chmod(script, 0o755)
    steps = {}
    for name, launcher in (
        ("fixed", ["-np", "2"]),
        (
            "elastic",
            ["--min-np", "2", "--max-np", "4"]
            + ["--host-discovery-script", script],
        ),
    ):
        report = os.path.join(tmp, f"{name}.json")
        proc, lines, reader = _launch(
            [
                *launcher,
                *(sys.executable, TRAIN, *_model_flags()),
                *("--epochs=1", f"--report={report}"),
            ]
        )
        proc.wait(timeout=FLAGS.timeout)
        reader.join(timeout=10)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} run failed:\n" + "".join(lines[-80:]))
        steps[name] = _median_step(report)
    return steps


def _median(values) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def report_step_times(elastic: dict) -> None:
    """Prints the step gaps before and after each resize, so that a step
    traced again after it (a stall of its own) would show."""
    ends = elastic["step_ends"]
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    for event in elastic["resizes"]:
        # `gaps[g - 1]` spans the switch after global step `g`.
        at = event["global_step"] - 1
        before = gaps[max(0, at - 10) : at]
        after = gaps[at + 1 : at + 11]
        print(
            f"steps {event['old_size']} -> {event['new_size']}: median "
            f"gap of the {len(before)} steps before {_median(before):.3f} "
            f"s; the resize's gap {gaps[at]:.3f} s; the next 5: "
            + " ".join(f"{g:.3f}" for g in after[:5])
            + f" s; median of the {len(after)} after {_median(after):.3f} s"
        )


def report_table_bytes(grow: dict, shrink: dict) -> None:
    """Prints the table's bytes at each resize against the least and the
    simulator's prediction (`resize_traffic` of the same table)."""
    table = resize.ResizedTable(FLAGS.vocab, (FLAGS.embedding_dim,), slots=2)
    predicted = resize.resize_traffic([table], (2, 4, 3))
    for event, guess in zip((grow, shrink), predicted, strict=True):
        moved, wire = event["table_bytes"], event["table_wire_bytes"]
        print(
            f"table {event['old_size']} -> {event['new_size']}: moved "
            f"{moved} B = {moved / guess.minimum:.4f} x the minimum "
            f"{guess.minimum:.0f} B (simulator: {guess.total:.0f} B); on "
            f"the wire {wire} B = {wire / guess.minimum:.3f} x the minimum "
            f"(simulator: {guess.total + guess.padding.sum():.0f} B); "
            f"reshard {event['table_seconds']:.3f} s of the switch"
        )
    for counts in ((3, 4), (8, 7)):
        (guess,) = resize.resize_traffic([table], counts)
        wire = guess.total + guess.padding.sum()
        print(
            f"simulated {counts[0]} -> {counts[1]}: moved "
            f"{guess.ratio:.4f} x the minimum, on the wire "
            f"{wire / guess.minimum:.3f} x (target <= 1.1)"
        )


def main(argv):
    del argv
    with tempfile.TemporaryDirectory() as tmp:
        overhead = measure_decision_overhead(tmp) if FLAGS.overhead else None
        elastic = measure_elastic(tmp)
        cold = measure_cold(tmp)
    grow, shrink = elastic["resizes"][:2]
    print(json.dumps({"resizes": elastic["resizes"], "cold": cold}, indent=1))
    restart = cold["cold_restart_seconds"]
    print(
        f"cold restart 2 -> 4 (save, stop, relaunch, restore, first step): "
        f"{restart:.3f} s"
    )
    for name, event, target in (
        ("grow", grow, restart / 6),
        ("shrink", shrink, 2.0),
    ):
        retrace = event.get("retrace_seconds", 0.0)
        rest = event["gap_seconds"] - event["switch_seconds"] - retrace
        print(
            f"{name} {event['old_size']} -> {event['new_size']}: stall "
            f"{event['stall_seconds']:.3f} s (gap {event['gap_seconds']:.3f} "
            f"s - normal step {event['normal_step_seconds']:.3f} s), "
            f"{event['bytes_moved']} bytes moved; target <= {target:.3f} s: "
            f"{'met' if event['stall_seconds'] <= target else 'MISSED'}; "
            f"of it: switch {event['switch_seconds']:.3f} s (table move "
            f"{event.get('table_seconds', 0.0):.3f} s), train step traced "
            f"again {retrace:.3f} s, the rest (first step of the new "
            f"group) {rest:.3f} s"
        )
    print(
        f"grow stall / cold restart = {grow['stall_seconds'] / restart:.4f}"
        " (target <= 0.1667)"
    )
    report_step_times(elastic)
    if FLAGS.vocab:
        report_table_bytes(grow, shrink)
    if overhead is not None:
        print(
            f"median step, 2 workers: fixed {overhead['fixed']:.4f} s, "
            f"elastic {overhead['elastic']:.4f} s (one plan broadcast per "
            f"step): {overhead['elastic'] / overhead['fixed'] - 1:+.1%}"
        )


if __name__ == "__main__":
    app.run(main)
