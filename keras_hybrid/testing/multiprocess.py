"""Runs a worker script on N real processes through a launcher.

With the TF engine the launcher is `keras-hybrid-run`; with the Horovod
engine it is `horovodrun -np N --gloo`, and the workers choose the Horovod
engine by themselves (a `HybridStrategy()` started by `horovodrun`). Each
worker saves what it computed with `save_result(out_dir, rank, obj)`; the
test reads every rank's result back. A hang becomes a failure: the whole
launch runs under a timeout.

Which engines the engine-parametrized tests run is read from
`KERAS_HYBRID_TEST_ENGINES` (comma-separated; default `tf`):
`make test-horovod` sets it to `horovod`.
"""

import dataclasses
import os
import pickle
import re
import shutil
import subprocess
import sys

from keras_hybrid.contract.worker_env import THREAD_VARIABLES

TEST_ENGINES_ENV = "KERAS_HYBRID_TEST_ENGINES"
LAUNCHERS = ("tf", "horovod")
# Seconds a timed-out launcher gets to stop its workers before SIGKILL.
_STOP_GRACE_SECONDS = 30
# horovodrun tags each line of worker r as "[r]<stdout>:" or "[r]<stderr>:".
_HOROVOD_TAG = re.compile(r"^\[(\d+)\]<std(?:out|err)>:", re.MULTILINE)


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


def engines_under_test() -> list[str]:
    """The engines that engine-parametrized tests run, in order.

    Raises:
        ValueError: If `KERAS_HYBRID_TEST_ENGINES` names an unknown engine.
    """
    value = os.environ.get(TEST_ENGINES_ENV, "tf")
    engines = [e.strip() for e in value.split(",") if e.strip()]
    unknown = [e for e in engines if e not in LAUNCHERS]
    if unknown or not engines:
        raise ValueError(
            f"`{TEST_ENGINES_ENV}` must list engines of {LAUNCHERS}, "
            f"comma-separated. Received: {TEST_ENGINES_ENV}={value!r}"
        )
    return engines


def save_result(out_dir: str, rank: int, obj) -> None:
    """Writes a worker's result atomically, for `run_workers` to read."""
    write_pickle(os.path.join(out_dir, f"rank{rank}.pkl"), obj)


def write_pickle(path: str, obj) -> None:
    """Pickles `obj` to `path` atomically (a reader never sees it half
    written), creating its folder."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
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
    engine: str = "tf",
) -> WorkerRun:
    """Launches `python script --out_dir=... *args` on `num_workers`.

    Args:
        script: String. Path of the worker script.
        num_workers: Int. Number of worker processes.
        out_dir: String. Where workers save results (`save_result`).
        args: Tuple of strings. More arguments for the script.
        timeout: Float. Seconds before the launch counts as hung.
        threads: Int. TF and OpenMP threads per worker.
        env: Optional dict. Extra environment variables.
        engine: String. `"tf"` launches through `keras-hybrid-run`,
            `"horovod"` through `horovodrun -np N --gloo` (its `[r]<stdout>:`
            line tags become `[r] `, as `keras-hybrid-run` writes them).

    Raises:
        ValueError: If `engine` is unknown.
    """
    if engine not in LAUNCHERS:
        raise ValueError(
            f"`engine` must be one of {LAUNCHERS}. Received: engine={engine!r}"
        )
    worker = [sys.executable, script, f"--out_dir={out_dir}", *args]
    # Tests read every rank's lines: the console shows them all.
    full_env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KERAS_HYBRID_CONSOLE_RANKS": "all",
        **(env or {}),
    }
    if engine == "tf":
        command = [
            *(sys.executable, "-m", "keras_hybrid.run"),
            *("-np", str(num_workers), "--threads", str(threads)),
            *worker,
        ]
    else:
        command = horovodrun(num_workers) + worker
        full_env.update({name: str(threads) for name in THREAD_VARIABLES})
        full_env["PYTHONUNBUFFERED"] = "1"
    returncode, stdout, stderr = _run_launcher(command, full_env, timeout)
    if engine == "horovod":
        stdout = _HOROVOD_TAG.sub(r"[\1] ", stdout)
        stderr = _HOROVOD_TAG.sub(r"[\1] ", stderr)
    results = {}
    for rank in range(num_workers):
        path = os.path.join(out_dir, f"rank{rank}.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                results[rank] = pickle.load(f)
    return WorkerRun(returncode, stdout, stderr, results)


def _run_launcher(command, env, timeout: float) -> tuple:
    """Runs the launcher; on timeout stops it *and its workers*.

    `subprocess.run(timeout=...)` kills only the launcher, and the workers
    (each in its own session) would keep loading the machine for the tests
    that follow. The launcher forwards SIGTERM to its workers, so it gets
    SIGTERM first and SIGKILL only if it has not exited after a grace.
    """
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=_STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        raise AssertionError(
            f"workers did not finish within {timeout}s (hang?); the "
            f"launcher was stopped\n{stdout[-4000:]}\n{stderr[-4000:]}"
        ) from None
    return proc.returncode, stdout, stderr


def horovodrun(num_workers: int) -> list[str]:
    """`horovodrun` of this Python's environment, on localhost with Gloo."""
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    found = beside if os.path.exists(beside) else shutil.which("horovodrun")
    if found is None:
        raise FileNotFoundError(
            "`horovodrun` was not found beside "
            f"{sys.executable} nor on PATH. Install Horovod (see "
            "docs/horovod.md), or run the tests with "
            f"{TEST_ENGINES_ENV}=tf."
        )
    n = str(num_workers)
    return [found, "-np", n, "-H", f"localhost:{n}", "--gloo"]
