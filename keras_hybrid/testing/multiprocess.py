"""Runs a worker script on N real processes through `keras-hybrid-run`.

Each worker saves what it computed with `save_result(out_dir, rank, obj)`;
the test reads every rank's result back. A hang becomes a failure: the
whole launch runs under a timeout.
"""

import dataclasses
import os
import pickle
import subprocess
import sys


@dataclasses.dataclass
class WorkerRun:
    """What a multi-process launch left behind."""

    returncode: int
    stdout: str
    stderr: str
    results: dict  # rank -> the object the worker saved

    def check(self) -> "WorkerRun":
        if self.returncode != 0:
            raise AssertionError(
                f"launcher exited {self.returncode}\n--- stdout\n"
                f"{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-6000:]}"
            )
        return self


def save_result(out_dir: str, rank: int, obj) -> None:
    """Writes a worker's result atomically, for `run_workers` to read."""
    path = os.path.join(out_dir, f"rank{rank}.pkl")
    with open(path + ".tmp", "wb") as f:
        pickle.dump(obj, f)
    os.replace(path + ".tmp", path)


def run_workers(
    script: str,
    num_workers: int,
    out_dir: str,
    args: tuple = (),
    timeout: float = 300,
    threads: int = 1,
    env: dict | None = None,
) -> WorkerRun:
    """Launches `python script --out_dir=... *args` on `num_workers`."""
    command = [
        sys.executable,
        "-m",
        "keras_hybrid.run",
        "-np",
        str(num_workers),
        "--threads",
        str(threads),
        sys.executable,
        script,
        f"--out_dir={out_dir}",
        *args,
    ]
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"workers did not finish within {timeout}s (hang?)\n"
            f"{(e.stdout or b'')[-4000:]!r}\n{(e.stderr or b'')[-4000:]!r}"
        ) from e
    results = {}
    for rank in range(num_workers):
        path = os.path.join(out_dir, f"rank{rank}.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                results[rank] = pickle.load(f)
    return WorkerRun(proc.returncode, proc.stdout, proc.stderr, results)
