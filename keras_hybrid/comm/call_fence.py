"""`CallFence`: workers agree on which collective call they are making.

Reading a partitioned table, `predict`, `evaluate`, `fit` and every save
are collectives: each worker must make the same call at the same time.
Code written for Horovod often makes one on rank 0 only (`if rank == 0:
model.get_weights()`). Left alone, that worker's collectives pair with
whatever its peers run next: a numpy broadcast error, a raw gRPC error, a
hang, or silently wrong values when two calls exchange tensors of the same
shapes.

So before such a call every worker all-gathers one small fixed-size record
(the call's name, this process's count of fenced calls) with the
strategy's `timeout_seconds`. If the records differ, every worker raises a
`RuntimeError` naming each rank's call; if a peer does not come, the caller
raises one naming the peers that exited. Only the outermost call fences:
`model.save` reads the weights and `fit` runs `evaluate` for validation,
and those inner calls are the same on every rank when the outer one is.
"""

import contextlib
import functools
import threading

import numpy as np
import tensorflow as tf
from absl import logging

# Calls that fence, by the name used in errors. A record carries the index.
CALLS = (
    "model.fit",
    "model.evaluate",
    "model.predict",
    "model.predict_on_batch",
    "model.train_on_batch",
    "model.test_on_batch",
    "model.get_weights",
    "layer.get_weights",
    "variable.numpy",
    "model.save",
    "model.save_weights",
    "model.export",
    "save_checkpoint",
    "restore_checkpoint",
)
# Reads of partitioned tables a callback may make inside `fit`.
_READS = ("model.get_weights", "layer.get_weights", "variable.numpy")
GUIDE = (
    'docs/migrating.md, section "Code that runs on rank 0 only '
    "(Horovod's `if rank == 0`)\""
)
# Marks a fence record, so that pairing with another collective shows.
_MAGIC = 0x6B68_6663
_RECORD = 4  # magic, call index, call count, rank


class CallFence:
    """Makes every worker agree on a collective call before it starts.

    Args:
        communicator: The job's `Communicator`.
        timeout_seconds: Float. How long a worker waits for its peers to
            reach the fence.
        watchdog: Optional `PeerWatchdog`, used to name peers that exited.

    Example:

    ```python
    fence = CallFence(strategy.communicator, 300.0)
    with fence.fenced("model.predict"):
        ...  # the collectives of the call
    ```

    Raises:
        RuntimeError: From `fenced`, on every worker that reached the fence,
            if the workers called different things, or if a peer did not
            reach it within `timeout_seconds` (naming peers that exited).
    """

    def __init__(
        self, communicator, timeout_seconds: float, watchdog=None
    ) -> None:
        self.communicator = communicator
        self.timeout_seconds = float(timeout_seconds)
        self.watchdog = watchdog
        self.count = 0  # fenced calls made by this process
        self._depth = threading.local()

    @contextlib.contextmanager
    def fenced(self, name: str):
        """Agrees on `name` with every worker, unless already inside a
        fenced call of this thread; then runs the block."""
        if name not in CALLS:
            raise ValueError(
                f"`name` must be one of {CALLS}. Received: name={name!r}"
            )
        depth = getattr(self._depth, "value", 0)
        if depth == 0:
            # Also on one worker: an elastic joiner enters `fit` as one
            # and makes collectives inside it once admitted.
            self._depth.outer = name
            if self.communicator.size > 1:
                self.agree(name)
        self._depth.value = depth + 1
        first_read = name in _READS and not getattr(self._depth, "read", "")
        if first_read:
            self._depth.read = name  # the call the user made
        try:
            yield
        except tf.errors.DeadlineExceededError as e:
            if depth == 0 or name not in _READS:
                raise
            # A read inside `fit` (a callback) that only some ranks make:
            # not fenced, so its collective timed out. Other failures (a
            # peer gone: unavailable, aborted) stay what they are: an
            # elastic job recovers from them.
            message = self._unfenced_message(
                self._depth.read, self._depth.outer, e
            )
            # Logged first: TensorFlow may crash this process (SIGSEGV)
            # after a timed-out collective, before the error is printed.
            logging.error("keras-hybrid: %s", message)
            raise RuntimeError(message) from e
        finally:
            self._depth.value = depth
            if first_read:
                self._depth.read = ""

    def agree(self, name: str) -> None:
        """Gathers every worker's record of its call and compares them.

        Raises:
            RuntimeError: If the records differ or a peer did not come.
        """
        comm = self.communicator
        self.count += 1
        record = tf.constant(
            [_MAGIC, CALLS.index(name), self.count, comm.rank], tf.int64
        )
        try:
            gathered = comm.gather_fixed(record, path="control")
            records = np.asarray(gathered).reshape(comm.size, _RECORD)
        except tf.errors.OpError as e:
            logging.info("keras-hybrid: the fence of %s failed: %s", name, e)
            raise RuntimeError(self._missing_message(name, e)) from None
        if len({_describe(row) for row in records}) > 1:
            raise RuntimeError(_mismatch_message(records))

    def _unfenced_message(self, name: str, outer: str, error) -> str:
        return (
            f"{name} failed on rank {self.communicator.rank} inside {outer} "
            f"({type(error).__name__}): reading a partitioned table is a "
            "collective every worker must make at the same point, and a "
            f"call inside {outer} (from a callback) is not fenced, so one "
            "made on some workers only waits for peers that never come. "
            f"{_advice(name)}"
        )

    def _missing_message(self, name: str, error: Exception) -> str:
        comm = self.communicator
        exited = []
        if self.watchdog is not None:
            exited = self.watchdog.unreachable_peers()
        # TF aborts every later collective of a process after one failed
        # (a timeout included); the peers' state is then unknown.
        aborted = "aborted" in str(error).lower()
        waiting = (
            "is unknown: this worker's collectives were aborted by an "
            "earlier failure (restart the job)"
            if aborted
            else f"did not call it within {self.timeout_seconds:g} s"
        )
        parts = [f"rank {comm.rank} called {name}"]
        for r in range(comm.size):
            if r in exited:
                parts.append(f"rank {r} has exited")
            elif r != comm.rank:
                parts.append(f"rank {r} {waiting}")
        return (
            f"{name} is a collective, but not every worker called it: "
            f"{', '.join(parts)}. {_advice(name)}"
        )


def _describe(row) -> tuple:
    magic, call, count, _ = (int(v) for v in row)
    if magic != _MAGIC or not 0 <= call < len(CALLS):
        return ("another collective", 0)
    return (CALLS[call], count)


def _mismatch_message(records) -> str:
    calls = [_describe(row) for row in records]
    same_names = len({name for name, _ in calls}) == 1
    parts = []
    for rank, (name, count) in enumerate(calls):
        # Counts tell calls of one name apart (one rank made an extra one).
        suffix = f" (its fenced call #{count})" if same_names else ""
        parts.append(f"rank {rank} called {name}{suffix}")
    first = next(name for name, _ in calls if name != "another collective")
    return (
        "Workers made different collective calls: "
        f"{', '.join(parts)}. {_advice(first)}"
    )


def _advice(name: str) -> str:
    return (
        f"Call {name} on every worker, in the same order; keep "
        "`if strategy.is_chief:` around printing and other pure-Python "
        f"side effects only. See {GUIDE}."
    )


# -- the fence of the running strategy

_lock = threading.Lock()
_active: dict = {"fence": None}


def install(fence: CallFence) -> None:
    """Makes `fence` the one `fenced` uses (the last strategy wins)."""
    with _lock:
        _active["fence"] = fence


def uninstall() -> None:
    """Turns fencing off (`fenced` does nothing)."""
    with _lock:
        _active["fence"] = None


def active() -> CallFence | None:
    """The installed fence, or None."""
    return _active["fence"]


def fenced(name: str):
    """`CallFence.fenced(name)` of the installed fence, else a no-op."""
    fence = _active["fence"]
    if fence is None:
        return contextlib.nullcontext()
    return fence.fenced(name)


def fences(name: str):
    """Decorator: the function runs inside `fenced(name)`."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with fenced(name):
                return fn(*args, **kwargs)

        return wrapper

    return decorate
