"""A persistent pool of worker processes: one launch, many scenarios.

Launching TensorFlow processes is the suite's main cost, so tests share
one pool per engine and worker count. A `WorkerPool` starts its workers
once, through the package's real launcher (`keras-hybrid-run -np N`, or
`horovodrun -np N --gloo` for the Horovod engine), and every worker runs
`pool_worker.py`: scenario after scenario, in the same order on every
rank. A scenario is a function in a Python file; it opens its own
`HybridStrategy`, closes it, and returns what this rank saw:

```python
def train(steps):
    with kh.HybridStrategy() as strategy:
        ...
        return {"weights": model.get_weights()}

run = shared_pool(2).run(SCENARIOS, "train", {"steps": 3}).check()
run.results[1]["weights"]
```

`run` returns a `WorkerRun`, as `run_workers` does: each rank's result,
and what the ranks printed during this scenario, with each line tagged
`[rank] ` as the launcher tags it. A scenario that raises on any rank, or
leaves a strategy open, fails (`returncode` 1) and the pool is stopped: a
failed collective aborts every later one in a process, so the next
scenario gets a fresh launch. A scenario that does not finish within its
timeout stops the pool and raises, so a hang is a failure.

Tests whose subject is the launch itself (a worker that dies, a timeout,
the command line, elastic resizes) launch their own processes with
`run_workers`.
"""

import atexit
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

from keras_hybrid.contract.worker_env import THREAD_VARIABLES
from keras_hybrid.testing import multiprocess
from keras_hybrid.testing.multiprocess import WorkerRun

_POLL_SECONDS = 0.02
# Seconds a pool may take to start: N TensorFlow imports on a busy
# 2-core machine.
START_TIMEOUT = 300
# Seconds the other ranks get to report after one rank failed.
_FAILED_RANK_GRACE = 10
_STOP_SECONDS = 30
# An idle Horovod worker is not idle: Horovod's background thread
# negotiates with its peers every cycle (`HOROVOD_CYCLE_TIME`), about a
# tenth of a core per worker measured on this machine, and the Horovod
# suite keeps a pool of 1, 2, 3 and 4 workers. A Horovod pool unused for
# this long is stopped when another pool runs a scenario; its next
# scenario starts it again, at about 4 CPU-s per worker, the CPU it would
# spin away idle in this time.
IDLE_HOROVOD_SECONDS = 40


class WorkerPool:
    """`num_workers` worker processes that run scenarios on request.

    Args:
        num_workers: Int. Number of worker processes.
        engine: String. `"tf"` launches through `keras-hybrid-run`,
            `"horovod"` through `horovodrun`.
        threads: Int. TF and OpenMP threads per worker.

    Raises:
        ValueError: If `engine` is unknown.
    """

    def __init__(self, num_workers: int, engine: str = "tf", threads=1):
        if engine not in multiprocess.LAUNCHERS:
            raise ValueError(
                f"`engine` must be one of {multiprocess.LAUNCHERS}. "
                f"Received: engine={engine!r}"
            )
        self.num_workers = num_workers
        self.engine = engine
        self.threads = threads
        self.launches = 0
        self._proc = None
        self._dir = None
        self._next = 0
        self.last_run = time.monotonic()

    @property
    def started(self) -> bool:
        """Whether its workers are up (or starting)."""
        return self._proc is not None

    def run(
        self,
        path: str,
        function: str,
        kwargs: dict | None = None,
        env: dict | None = None,
        timeout: float = 300,
    ) -> WorkerRun:
        """Runs `function(**kwargs)` of the file `path` on every worker.

        Args:
            path: String. The scenario's Python file.
            function: String. Name of the scenario function in it.
            kwargs: Optional dict. Its arguments (picklable).
            env: Optional dict. Environment variables for this scenario
                only (read when the scenario runs, not at TF's start).
            timeout: Float. Seconds before the scenario counts as hung.

        Returns:
            `WorkerRun` with rank -> the scenario's return value.

        Raises:
            AssertionError: If the scenario did not finish in time, or
                the pool could not start.
        """
        self._start()
        number = self._next
        self._next += 1
        job = {
            "path": os.path.abspath(path),
            "function": function,
            "kwargs": dict(kwargs or {}),
            "env": {k: str(v) for k, v in (env or {}).items()},
        }
        multiprocess.write_pickle(
            os.path.join(self._dir, f"job{number}.pkl"), job
        )
        job_dir = os.path.join(self._dir, str(number))
        outcomes = self._wait(job_dir, time.monotonic() + timeout)
        self.last_run = time.monotonic()
        stdout = _tagged(job_dir, "out", self.num_workers)
        stderr = _tagged(job_dir, "err", self.num_workers)
        if outcomes is None:
            launcher = self._stop()
            raise AssertionError(
                f"scenario {function} of {path} did not finish within "
                f"{timeout}s on {self.num_workers} workers (hang?); the "
                f"pool was stopped\n--- stdout\n{stdout[-4000:]}\n"
                f"--- stderr\n{stderr[-6000:]}\n--- launcher\n"
                f"{launcher[-2000:]}"
            )
        errors = {r: o["error"] for r, o in outcomes.items() if o["error"]}
        if len(outcomes) < self.num_workers or errors:
            launcher = self._stop()
            stderr += "".join(
                f"[{r}] scenario failed:\n{e}\n" for r, e in errors.items()
            )
            if len(outcomes) < self.num_workers:
                stderr += f"\n--- launcher\n{launcher[-4000:]}"
        return WorkerRun(
            returncode=1 if errors or len(outcomes) < self.num_workers else 0,
            stdout=stdout,
            stderr=stderr,
            results={r: o["result"] for r, o in outcomes.items()},
        )

    def close(self) -> None:
        """Lets the workers exit (idempotent); the next `run` starts
        them again."""
        self._stop()

    # -- the launch

    def _start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._stop()
        self._dir = tempfile.mkdtemp(
            prefix=f"pool_{self.engine}{self.num_workers}_"
        )
        self._next = 0
        self.launches += 1
        worker = [
            *(sys.executable, "-m", "keras_hybrid.testing.pool_worker"),
            *(self._dir, str(os.getpid())),
        ]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        if self.engine == "tf":
            command = [
                *(sys.executable, "-m", "keras_hybrid.run"),
                *("-np", str(self.num_workers)),
                *("--threads", str(self.threads)),
                # The workers fork from one process that imported these.
                *("--preload", "tensorflow,keras"),
                *worker,
            ]
        else:
            command = multiprocess.horovodrun(self.num_workers) + worker
            env.update({name: str(self.threads) for name in THREAD_VARIABLES})
            env["PYTHONUNBUFFERED"] = "1"
        with open(os.path.join(self._dir, "launcher.log"), "wb") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + START_TIMEOUT
        ready = [
            os.path.join(self._dir, f"ready{r}.pkl")
            for r in range(self.num_workers)
        ]
        while not all(map(os.path.exists, ready)):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                launcher = self._stop()
                raise AssertionError(
                    f"the pool of {self.num_workers} {self.engine} workers "
                    f"did not start within {START_TIMEOUT}s\n{launcher}"
                )
            time.sleep(_POLL_SECONDS)

    def _wait(self, job_dir: str, deadline: float) -> dict | None:
        """rank -> outcome of every rank that reported; `None` on timeout.

        Returns early, with the ranks that reported, when the launcher
        exited or when a rank failed and the others did not follow.
        """
        paths = {
            r: os.path.join(job_dir, f"rank{r}.pkl")
            for r in range(self.num_workers)
        }
        outcomes = {}
        failed_at = None
        while len(outcomes) < self.num_workers:
            for rank, path in paths.items():
                if rank not in outcomes and os.path.exists(path):
                    with open(path, "rb") as f:
                        outcomes[rank] = pickle.load(f)
                    if outcomes[rank]["error"] and failed_at is None:
                        failed_at = time.monotonic()
            if len(outcomes) == self.num_workers:
                break
            now = time.monotonic()
            if self._proc.poll() is not None:
                return outcomes
            if failed_at is not None and now > failed_at + _FAILED_RANK_GRACE:
                return outcomes
            if now > deadline:
                return None
            time.sleep(_POLL_SECONDS)
        return outcomes

    def _stop(self) -> str:
        """Stops the workers; returns the launcher's output."""
        if self._proc is None:
            return ""
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            # Workers exit when they read the `None` job.
            multiprocess.write_pickle(
                os.path.join(self._dir, f"job{self._next}.pkl"), None
            )
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                # Busy in a scenario: the launcher forwards SIGTERM.
                proc.terminate()
                try:
                    proc.wait(timeout=_STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        with open(os.path.join(self._dir, "launcher.log"), "rb") as f:
            launcher = f.read().decode(errors="replace")
        shutil.rmtree(self._dir, ignore_errors=True)
        return launcher


_pools: dict = {}


def shared_pool(num_workers: int, engine: str = "tf") -> WorkerPool:
    """The session's pool of `num_workers` on `engine` (one thread each),
    started at its first scenario and stopped at exit."""
    key = (num_workers, engine)
    if key not in _pools:
        _pools[key] = WorkerPool(num_workers, engine)
    return _pools[key]


def run_scenario(
    path: str,
    function: str,
    num_workers: int,
    kwargs: dict | None = None,
    *,
    engine: str = "tf",
    env: dict | None = None,
    timeout: float = 300,
) -> WorkerRun:
    """Runs a scenario on the shared pool (see `WorkerPool.run`), after
    stopping the other Horovod pools idle for `IDLE_HOROVOD_SECONDS`."""
    chosen = shared_pool(num_workers, engine)
    now = time.monotonic()
    for other in _pools.values():
        if (
            other is not chosen
            and other.engine == "horovod"
            and other.started
            and now - other.last_run > IDLE_HOROVOD_SECONDS
        ):
            other.close()
    return chosen.run(path, function, kwargs, env=env, timeout=timeout)


@atexit.register
def close_pools() -> None:
    """Stops every shared pool."""
    for pool in _pools.values():
        pool.close()


def _tagged(job_dir: str, kind: str, num_workers: int) -> str:
    """Every rank's `kind` output, each line tagged `[rank] `."""
    text = []
    for rank in range(num_workers):
        path = os.path.join(job_dir, f"rank{rank}.{kind}")
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
        text += [f"[{rank}] {line}\n" for line in lines]
    return "".join(text)
