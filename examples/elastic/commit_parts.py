"""Times the parts of one commit of a partitioned table alone, on one
process: what the training thread, the writer thread and the launcher's
commit server spend on one member's shard.

```sh
python -m examples.elastic.commit_parts
```

The defaults are the shard of `measure_commit.py --vocab=50000
--embedding_dim=64` on 2 workers: a table of 25000 rows of 64 float32 and
its two Adam slots (19.2 MB). The variables are in TensorFlow's
copy-on-read mode, as the partitioned table is (it is gathered from and
scattered into), and each repeat scatters into them first, as a step
does. Each part prints the median CPU time of its thread (user and
system, page faults included) and its minor page faults, over
`--repeats`:

Each part is timed two ways: the baseline (new arrays and new files) and
the way the commit stores work (as built):

- training thread: TensorFlow's read of the variables (a copy in
  copy-on-read mode), then a numpy copy into new arrays, the two commits
  kept holding them (baseline); or a read that shares the variable's
  memory (`stored_tensor_shared`), then a numpy copy into arrays reused
  from commit to commit (`elastic/file_store.py`, as built);
- writer thread, directory store: the blob (`commit_blob`) to a new file
  under `--root` plus the removal of a pruned one (baseline), or over the
  task's spare plus the prune that makes the next spare (`commit_files`,
  as built);
- served store: the worker's thread sending the blob (`blob_stream`), and
  the server's thread receiving it into one reused buffer alone, then
  into a new file (baseline), or over the spare through that buffer, or
  spliced from the socket over the spare (as built), each with its prune.
"""

import collections
import contextlib
import os
import resource
import statistics
import tempfile
import threading
import time
from multiprocessing.connection import Client
from multiprocessing.connection import Listener

import numpy as np
from absl import app
from absl import flags

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.blob_stream import BlobReader
from keras_hybrid.contract.blob_stream import BlobWriter
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_files import folder_name

FLAGS = flags.FLAGS
flags.DEFINE_integer("rows", 25000, "Rows of the shard of the table.")
flags.DEFINE_integer("dim", 64, "Width of its rows (float32).")
flags.DEFINE_integer("repeats", 15, "Times each part is timed.")
flags.DEFINE_string("root", "/dev/shm", "Where the files are written.")


class _Clock:
    """The calling thread's CPU time (ms) and minor page faults."""

    def __enter__(self):
        self._start = _usage()
        return self

    def __exit__(self, *exc):
        end = _usage()
        self.ms = 1e3 * (end[0] - self._start[0])
        self.faults = end[1] - self._start[1]


def _usage():
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    return time.thread_time(), faults


def _line(part: str, clocks: list) -> str:
    ms = statistics.median(c.ms for c in clocks)
    faults = statistics.median(c.faults for c in clocks)
    return f"{part:58s} {ms:6.2f} ms  {faults:6.0f} faults"


def training_thread() -> list:
    import tensorflow as tf

    from keras_hybrid._compat.tf import ConvertibleVariable

    shape = (FLAGS.rows, FLAGS.dim)
    tables = [
        ConvertibleVariable(initial_value=tf.random.uniform(shape))
        for _ in range(3)
    ]
    ids = tf.constant(np.arange(0, FLAGS.rows, 7), tf.int64)
    ones = tf.IndexedSlices(tf.ones([len(ids), FLAGS.dim]), ids)
    reused = [np.ones(shape, np.float32) for _ in tables]
    held = collections.deque(maxlen=2)  # the commits kept (baseline)
    parts = {"read": [], "new": [], "shared": [], "reused": []}
    for _ in range(FLAGS.repeats):
        for table in tables:
            table.sparse_read(ids)  # copy-on-read mode, as a table
            table.scatter_add(ones)
        with _Clock() as clock:
            reads = [table.value() for table in tables]
        parts["read"].append(clock)
        with _Clock() as clock:
            held.append([np.array(np.asarray(r)) for r in reads])
        parts["new"].append(clock)
        del reads
        with _Clock() as clock:
            reads = [table.stored_tensor_shared() for table in tables]
        parts["shared"].append(clock)
        with _Clock() as clock:
            for array, read in zip(reused, reads, strict=True):
                np.copyto(array, np.asarray(read))
        parts["reused"].append(clock)
        del reads  # before the next update, which would copy the table
    return [
        _line("training: read, copy-on-read (baseline)", parts["read"]),
        _line("training: numpy copy into new arrays (baseline)", parts["new"]),
        _line("training: read, shared (as built)", parts["shared"]),
        _line(
            "training: numpy copy into reused arrays (as built)",
            parts["reused"],
        ),
    ]


def _write_new(folder: str, step: int, produce) -> None:
    """The baseline: a new file (buffered, so no splice) renamed into
    place, and the file of the step before removed (its prune)."""
    fd, temp = tempfile.mkstemp(prefix=".writing-", dir=folder)
    with os.fdopen(fd, "wb") as f:
        produce(f)
    os.replace(temp, os.path.join(folder, f"{step}.npy"))
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(folder, f"{step - 1}.npy"))


def _write_spare(files, step: int, produce) -> None:
    """As built: over task 0's spare, then the prune that makes the next."""
    files.write(folder_name(step, 0), 0, produce)
    files.prune(0, [folder_name(step, 0)])


class _Unspliced:
    """A raw file seen through `write` alone: `BlobReader.copy_to` then
    receives into its buffer and writes, without the splice."""

    def __init__(self, f) -> None:
        self.write = f.write


def _timed(folder: str, variant: str, step: int, produce) -> _Clock:
    with _Clock() as clock:
        if variant == "new":
            _write_new(folder, step, produce)
        elif variant == "spare":
            _write_spare(CommitFiles(folder), step, produce)
        else:  # the spare, not spliced
            _write_spare(
                CommitFiles(folder), step, lambda f: produce(_Unspliced(f))
            )
    return clock


def directory_writer(arrays, root: str) -> list:
    lines = []
    for label, variant in (
        ("a new file, removal (baseline)", "new"),
        ("over the spare (as built)", "spare"),
    ):
        with tempfile.TemporaryDirectory(dir=root) as folder:
            clocks = [
                _timed(
                    folder,
                    variant,
                    step,
                    lambda f: commit_blob.write_blob(f, arrays),
                )
                for step in range(FLAGS.repeats + 1)
            ]
            lines.append(_line(f"directory writer: {label}", clocks[1:]))
    return lines


def served(arrays, root: str) -> list:
    listener = Listener(("127.0.0.1", 0), authkey=b"parts")
    sent = []
    sender = threading.Thread(target=_send, args=(listener, arrays, sent))
    sender.start()
    conn = listener.accept()
    lines = []
    variants = (
        ("receive into one buffer alone", None),
        ("receive into a new file, removal (baseline)", "new"),
        ("receive over the spare, one buffer", "unspliced"),
        ("receive over the spare, spliced (as built)", "spare"),
    )
    for label, variant in variants:
        clocks = []
        with tempfile.TemporaryDirectory(dir=root) as folder:
            for step in range(FLAGS.repeats + 1):
                conn.send("blob")
                blob = BlobReader(conn)
                if variant is None:
                    with _Clock() as clock:
                        blob.drain()
                else:
                    clock = _timed(folder, variant, step, blob.copy_to)
                clocks.append(clock)
                conn.send("written")
        lines.append(_line(f"server: {label}", clocks[1:]))
    conn.send("stop")
    sender.join()
    conn.close()
    listener.close()
    return [_line("served writer: send the blob", sent), *lines]


def _send(listener, arrays, clocks: list) -> None:
    with Client(listener.address, authkey=b"parts") as conn:
        while conn.recv() == "blob":
            with _Clock() as clock:
                stream = BlobWriter(conn)
                commit_blob.write_blob(stream, arrays)
                stream.finish()
            clocks.append(clock)
            conn.recv()


def main(argv):
    del argv
    shape = (FLAGS.rows, FLAGS.dim)
    arrays = [np.random.rand(*shape).astype(np.float32) for _ in range(3)]
    size = sum(a.nbytes for a in arrays)
    lines = [
        f"one commit of {size / 1e6:.1f} MB (3 arrays of {shape[0]} x "
        f"{shape[1]} float32), median CPU time of each thread over "
        f"{FLAGS.repeats}:",
        *training_thread(),
        *directory_writer(arrays, FLAGS.root),
        *served(arrays, FLAGS.root),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
