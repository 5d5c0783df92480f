"""Faults the soak's worker injects into itself: a SIGKILL at a chosen
moment of an elastic job.

A `Fault` names the rank that dies (among the members when it fires),
the job's global step from which it is armed, and the moment:

- `step`: `delay` seconds into a train step (a timer started when the
  step begins);
- `commit`: in the middle of writing a commit: a file written through
  its mapping (the directory store, and the served store's workers on
  the launcher's host) before it is renamed into the commit's folder; an
  upload (the served store's other hosts) after the first array of its
  blob, so it is cut short; the buddy store's blob written into this
  worker's buffer, before any buddy got it;
- `row_move`: as a resize's (or a recovery's) row move starts;
- `save`: inside `model.save`, after the archive's first entries, before
  its weights (a half-written file on the chief);
- `checkpoint`: inside a sharded checkpoint's save, after the first block
  of this worker's first table file.

Each fault fires once in the whole job: the process that fires it first
creates its marker (`fired-<i>` in the output folder) exclusively. The
hooks wrap functions of this package and `zipfile`, through
`unittest.mock`, for the life of the worker process only.
"""

import contextlib
import dataclasses
import fcntl
import json
import os
import signal
import threading
import zipfile
from unittest import mock

import keras

from keras_hybrid.checkpoint import shard_files
from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.mapped_blobs import MappedBlobs
from keras_hybrid.elastic.buddy_sender import BuddySender
from keras_hybrid.sparse import resharding

MOMENTS = ("step", "commit", "row_move", "save", "checkpoint")


@dataclasses.dataclass(frozen=True)
class Fault:
    """One SIGKILL of a worker.

    Attributes:
        rank: Int. The member rank that dies, when the fault fires.
        step: Int. The job's global step from which the fault is armed.
        moment: String. One of `MOMENTS`.
        delay: Float. For `step`: seconds into the step.
        drop_slot: Boolean. Whether the dying worker first lowers the
            discovery file's slots by one (its host slot is gone), or the
            launcher may start a joiner in its place.
    """

    rank: int
    step: int
    moment: str
    delay: float = 0.0
    drop_slot: bool = False

    def __post_init__(self):
        if self.moment not in MOMENTS:
            raise ValueError(
                f"`moment` must be one of {MOMENTS}. Received: "
                f"moment={self.moment!r}"
            )


def dumps(faults) -> str:
    """The faults as JSON (a worker flag)."""
    return json.dumps([dataclasses.asdict(f) for f in faults])


def loads(text: str) -> list:
    """Faults from `dumps`' JSON."""
    return [Fault(**f) for f in json.loads(text or "[]")]


class Injector:
    """Kills this worker at its faults' moments.

    Args:
        faults: List of `Fault`.
        out_dir: String. Where markers of fired faults go.
        membership: The strategy's `ElasticMembership`.
        slots_file: Optional string. The discovery file a `drop_slot`
            fault lowers.
    """

    def __init__(self, faults, out_dir: str, membership, slots_file=None):
        self.faults = list(faults)
        self.out_dir = out_dir
        self.membership = membership
        self.slots_file = slots_file
        self.saving = False  # inside the soak's `model.save`

    @contextlib.contextmanager
    def installed(self):
        """Within this context, the moments' hooks are in place."""
        hooks = (
            (commit_blob, "write_blob", self._write_blob),
            (MappedBlobs, "publish", self._publish),
            (BuddySender, "_fill", self._fill),
            (resharding, "_move_all", self._move_all),
            (shard_files, "write_blocks", self._write_blocks),
            (zipfile.ZipFile, "writestr", self._writestr),
        )
        with contextlib.ExitStack() as stack:
            for owner, name, make in hooks:
                original = getattr(owner, name)
                stack.enter_context(
                    mock.patch.object(owner, name, make(original))
                )
            yield self

    def callback(self) -> keras.callbacks.Callback:
        """The callback that arms `step` faults at each step's start."""
        return _StepFaults(self)

    # -- firing

    def armed(self, moment: str):
        """The index of a fault of `moment` that this worker fires now,
        or None."""
        membership = self.membership
        if membership.joining:
            return None
        for i, fault in enumerate(self.faults):
            if (
                fault.moment == moment
                and fault.rank == membership.rank
                and membership.global_step >= fault.step
                and not os.path.exists(self._marker(i))
            ):
                return i
        return None

    def fire(self, index: int, where: str) -> None:
        """Kills this process for fault `index`, unless another process
        fired it already."""
        try:
            fd = os.open(
                self._marker(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY
            )
        except FileExistsError:
            return
        fault = self.faults[index]
        if fault.drop_slot and self.slots_file:
            _lower_slots(self.slots_file)
        record = {
            "fault": index,
            "task": self.membership.task,
            "rank": self.membership.rank,
            "size": self.membership.size,
            "global_step": self.membership.global_step,
            "where": where,
        }
        os.write(fd, json.dumps(record).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    def _marker(self, index: int) -> str:
        return os.path.join(self.out_dir, f"fired-{index}")

    # -- the hooks

    def _write_blob(self, original):
        def write_blob(f, arrays):
            index = self.armed("commit")
            if index is None or len(arrays) < 2:
                return original(f, arrays)
            original(f, arrays[:1])
            f.flush()
            self.fire(index, "commit: blob cut after its first array")
            return original(f, arrays[1:])

        return write_blob

    def _publish(self, original):
        def publish(blobs, *args, **kwargs):
            index = self.armed("commit")
            if index is not None:
                self.fire(index, "commit: its file written, not renamed")
            return original(blobs, *args, **kwargs)

        return publish

    def _fill(self, original):
        def fill(sender, buffer, arrays):
            views = original(sender, buffer, arrays)
            index = self.armed("commit")
            if index is not None:
                self.fire(index, "commit: its buddy blob written, not given")
            return views

        return fill

    def _move_all(self, original):
        def move_all(*args, **kwargs):
            index = self.armed("row_move")
            if index is not None:
                self.fire(index, "row move: as it starts")
            return original(*args, **kwargs)

        return move_all

    def _write_blocks(self, original):
        def write_blocks(path, shape, dtype, blocks):
            index = self.armed("checkpoint")
            if index is None:
                return original(path, shape, dtype, blocks)

            def cut(blocks):
                for block in blocks:
                    yield block
                    self.fire(index, f"checkpoint: {path} cut short")

            return original(path, shape, dtype, cut(blocks))

        return write_blocks

    def _writestr(self, original):
        def writestr(zf, *args, **kwargs):
            index = self.armed("save") if self.saving else None
            if index is not None:
                zf.fp.flush()
                self.fire(index, "model.save: before its weights")
            return original(zf, *args, **kwargs)

        return writestr


class _StepFaults(keras.callbacks.Callback):
    def __init__(self, injector: Injector) -> None:
        super().__init__()
        self._injector = injector

    def on_train_batch_begin(self, batch, logs=None):
        index = self._injector.armed("step")
        if index is None:
            return
        delay = self._injector.faults[index].delay
        timer = threading.Timer(
            delay, self._injector.fire, (index, f"step: {delay:.3f} s in")
        )
        timer.daemon = True
        timer.start()


def _lower_slots(path: str) -> None:
    """Lowers the `localhost:N` discovery file by one slot (under a lock:
    two workers may die at once)."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            host, _, slots = f.read().strip().partition(":")
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"{host}:{max(0, int(slots or 1) - 1)}\n")
        os.replace(tmp, path)
