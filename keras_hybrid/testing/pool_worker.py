"""One worker of a `WorkerPool`: runs scenario after scenario.

Started by `WorkerPool` through the launcher (`keras-hybrid-run -np N` or
`horovodrun`) as `python -m keras_hybrid.testing.pool_worker POOL_DIR
TEST_PID`, under `absl.app.run` as a worker script would be. Every rank
reads the same numbered jobs from `POOL_DIR` in the same order. For each
job the worker:

1. sends its file descriptors 1 and 2 to the job's output files, so the
   test sees what this scenario printed and logged (TensorFlow's C++ log
   included), and nothing of the scenarios before it;
2. sets the job's environment variables and imports the scenario's module
   by path (its folder goes on `sys.path`, for the modules beside it);
3. calls `function(**kwargs)`; the scenario opens its `HybridStrategy` and
   closes it (`with kh.HybridStrategy(...) as strategy:`);
4. takes the process back to where it was: Keras' session, dtype policy
   and console, the environment and the working folder; a strategy left
   open (Keras still patched, or the peer watchdog running) is an error;
5. writes `{"result": ..., "error": ...}` for the test to read.

A scenario that fails leaves its error in the file and the worker goes on
waiting; the test stops the pool (a failed collective aborts every later
one in the process) and the next scenario starts a fresh one. The worker
exits when the job is `None` or when the test process is gone.
"""

import gc
import importlib.util
import os
import pickle
import sys
import time
import traceback

from absl import app
from absl import logging as absl_logging

from keras_hybrid.testing.multiprocess import write_pickle

_POLL_SECONDS = 0.02


def main(argv: list[str]) -> None:
    pool_dir, test_pid = argv[1], int(argv[2])
    rank = int(
        os.environ.get("KERAS_HYBRID_RANK", os.environ.get("HOROVOD_RANK"))
    )
    # Imported before the first scenario, which then does not pay for
    # TensorFlow's start.
    import keras

    import keras_hybrid  # noqa: F401

    # What the imports made lives as long as the process: frozen, it is
    # out of every later collection (each `clear_session`, and each
    # variable whose path collides with an earlier scenario's model),
    # which then scans only what the scenarios made.
    gc.collect()
    gc.freeze()
    baseline = _Baseline(keras)
    write_pickle(os.path.join(pool_dir, f"ready{rank}.pkl"), os.getpid())
    number = 0
    while True:
        job = _wait_for_job(pool_dir, number, test_pid)
        if job is None:
            return
        outcome = _run_job(job, os.path.join(pool_dir, str(number)), rank)
        outcome["error"] = outcome["error"] or _clean_up(keras, baseline)
        _write_outcome(pool_dir, number, rank, outcome)
        number += 1


class _Baseline:
    """What a scenario may change and the next one must not see."""

    def __init__(self, keras) -> None:
        self.cwd = os.getcwd()
        self.environ = dict(os.environ)
        self.policy = keras.config.dtype_policy().name
        self.interactive = keras.config.is_interactive_logging_enabled()
        self.log_filters = list(absl_logging.get_absl_logger().filters)


def _wait_for_job(pool_dir: str, number: int, test_pid: int):
    path = os.path.join(pool_dir, f"job{number}.pkl")
    while not os.path.exists(path):
        if not _alive(test_pid):
            return None
        time.sleep(_POLL_SECONDS)
    with open(path, "rb") as f:
        return pickle.load(f)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run_job(job: dict, job_dir: str, rank: int) -> dict:
    outcome = {"result": None, "error": None}
    with _Captured(job_dir, rank):
        os.environ.update(job["env"])
        try:
            function = getattr(_load(job["path"]), job["function"])
            outcome["result"] = function(**job["kwargs"])
        except BaseException:  # noqa: BLE001  (SystemExit too: the test shows it)
            outcome["error"] = traceback.format_exc()
            print(outcome["error"], file=sys.stderr, flush=True)
    return outcome


def _load(path: str):
    """The module of the scenario file at `path`, imported once."""
    name = "pool_scenario_" + os.path.splitext(path)[0].strip("/").replace(
        "/", "_"
    ).replace(".", "_")
    if name in sys.modules:
        return sys.modules[name]
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _clean_up(keras, baseline: _Baseline) -> str | None:
    """Puts the process back; returns an error if a strategy was left
    open (its patches would leak into the next scenario)."""
    from keras_hybrid.patches import registry
    from keras_hybrid.strategy import cluster

    left_open = registry.open_count() > 0 or cluster.watchdog() is not None
    keras.backend.clear_session()
    # A new process has no TF global seed; a strategy or the scenario may
    # have set one.
    import tensorflow as tf

    tf.random.set_seed(None)
    keras.config.set_dtype_policy(baseline.policy)
    if baseline.interactive:
        keras.config.enable_interactive_logging()
    else:
        keras.config.disable_interactive_logging()
    absl_logging.get_absl_logger().filters[:] = baseline.log_filters
    # `log_first_n` counts per process: each scenario starts at zero, as
    # its own process would.
    absl_logging._log_counter_per_token.clear()
    os.chdir(baseline.cwd)
    os.environ.clear()
    os.environ.update(baseline.environ)
    if left_open:
        return (
            "the scenario left a HybridStrategy open; close it (`with "
            "kh.HybridStrategy(...) as strategy:`)"
        )
    return None


class _Captured:
    """Sends file descriptors 1 and 2 to `rank<r>.out` and `.err` in
    `job_dir` for the time of a scenario."""

    def __init__(self, job_dir: str, rank: int) -> None:
        os.makedirs(job_dir, exist_ok=True)
        self._paths = [
            os.path.join(job_dir, f"rank{rank}.{kind}")
            for kind in ("out", "err")
        ]

    def __enter__(self) -> "_Captured":
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = [os.dup(1), os.dup(2)]
        for fd, path in zip((1, 2), self._paths, strict=True):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        return self

    def __exit__(self, *exc_info) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, fd)
            os.close(saved)


def _write_outcome(pool_dir: str, number: int, rank: int, outcome) -> None:
    path = os.path.join(pool_dir, str(number), f"rank{rank}.pkl")
    try:
        write_pickle(path, outcome)
    except Exception:  # noqa: BLE001  (an unpicklable result)
        write_pickle(path, {"result": None, "error": traceback.format_exc()})


if __name__ == "__main__":
    # As the worker scripts do: absl's flags parsed, its log at INFO.
    app.run(main)
