"""One elastic run of `main.py` for `measure_commit.py`, on this host, with
a host discovery script whose slots the caller can change, and the chief's
logged commit summary."""

import json
import os
import re
import subprocess
import sys
import threading

TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "main.py")
RUN = [sys.executable, "-m", "keras_hybrid.run"]
_COMMIT_LOG = re.compile(
    r"task 0 committed (\d+) times .*median ([0-9.]+) s each, every (\d+) "
    r"steps; median step ([0-9.]+) s.*?(\d+) bytes of buddy rows"
)


def launch(
    tmp: str,
    name: str,
    slots: int,
    launcher_args: list,
    worker_args: list,
    on_line=None,
    timeout: float = 900,
) -> tuple:
    """Runs `keras-hybrid-run <launcher_args> main.py <worker_args>` (one
    epoch, batches of 96) on `slots` local slots.

    Args:
        tmp: String. A directory for the discovery script and the report.
        name: String. The run's name (its files in `tmp`).
        slots: Int. The slots the discovery script reports at first.
        launcher_args: List of strings. The launcher's flags.
        worker_args: List of strings. `main.py`'s flags.
        on_line: Optional callable `(line, slots_file)`, called on each
            line of output; it may rewrite `slots_file`.
        timeout: Float. Seconds the run may take.

    Returns:
        `(report, output)`: rank 0's `--report` and the launcher's output.

    Raises:
        RuntimeError: If the run fails.
    """
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
            *("--host-discovery-script", script),
            *("--discovery-interval", "0.5"),
            *launcher_args,
            sys.executable,
            TRAIN,
            *("--epochs=1", "--batch_size=96", f"--report={report}"),
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
    code = proc.wait(timeout=timeout)
    reader.join(timeout=10)
    if code != 0:
        raise RuntimeError(f"{name} exited {code}:\n" + "".join(lines[-80:]))
    with open(report) as f:
        return json.load(f), "".join(lines)


def commit_log(output: str) -> dict:
    """The chief's summary of its commits (`ElasticCommit.on_train_end`)."""
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
