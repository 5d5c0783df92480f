"""The Horovod engine: `hvd.allreduce`, `allgather`, `alltoall`, `broadcast`.

Horovod matches a collective across processes by the name of its op. Inside
a `tf.function` that name comes from the input tensor's name in the traced
graph, which is the same on every worker that traced the same code, so a
worker that retraces alone still meets its peers (what content-derived
instance keys do for the TF engine). Horovod sizes every exchange itself:
`hvd.alltoall` takes unequal splits and `hvd.allgather` unequal rows, so
nothing is padded on the wire. In a traced step an all-to-all's input is
padded in the block a worker sends itself, so that its shape, and with it
Horovod's cached negotiation, stays the same from step to step
(`stable_alltoall`).

Horovod has no per-collective timeout, so `timeout_seconds` is not used:
a rank that exits or fails ends the collectives of the others ("Horovod has
been shut down"), and `horovodrun` stops the job. Its stall inspector
(`HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`) does not stop a rank waiting for a
live peer that never joins (tested with Gloo).

Tested with Horovod 0.28.1 (Gloo) on TF 2.15.1 and Keras 3.15.
"""

import tensorflow as tf

from keras_hybrid.comm import byte_sizes
from keras_hybrid.comm import capacity
from keras_hybrid.comm import high_water
from keras_hybrid.comm.comm_stats import PATHS
from keras_hybrid.comm.communicator import Communicator
from keras_hybrid.comm.communicator import ExchangePlan
from keras_hybrid.comm.communicator import split_flat
from keras_hybrid.comm.stable_alltoall import StableAlltoall

BUILD_COMMAND = (
    "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
    "HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 "
    "pip install --no-build-isolation horovod==0.28.1"
)


def import_horovod():
    """Returns `horovod.tensorflow`, or raises `ImportError` saying how to
    build it.

    Raises:
        ImportError: If Horovod is not installed, was built without its
            TensorFlow ops, or was built against another TensorFlow.
    """
    try:
        import horovod.tensorflow as hvd
    except (ImportError, OSError, tf.errors.NotFoundError) as e:
        raise ImportError(
            "engine='horovod' needs Horovod built with its TensorFlow ops "
            f"and Gloo. Importing `horovod.tensorflow` failed: {e}\n"
            "Horovod 0.28.1 builds against tensorflow-cpu==2.15.1 (not TF "
            ">= 2.16); install that first, then keras==3.15.*, then, with "
            "cmake and a C++ compiler on the path:\n  "
            f"{BUILD_COMMAND}\n(`make test-horovod` builds such an "
            "environment in `.venv-hvd`; see docs/horovod.md.) Or use "
            "engine='tf', which needs no extra install."
        ) from e
    return hvd


def init_horovod() -> tuple[int, int, int]:
    """Initializes Horovod once per process (`hvd.init()` unless done).

    Returns:
        `(rank, size, local_rank)` as Horovod reports them.
    """
    hvd = import_horovod()
    if not hvd.is_initialized():
        hvd.init()
    return hvd.rank(), hvd.size(), hvd.local_rank()


class HorovodCommunicator(Communicator):
    """`Communicator` on Horovod's TensorFlow ops (Gloo, MPI or NCCL).

    Bytes are charged with the same model as `TFCommunicator`: an
    all-reduce of D bytes sends 2 (N - 1) / N D, an all-gather of D local
    bytes (N - 1) D, an all-to-all the rows bound for other workers. What
    pads an all-to-all stays on this worker and is not charged; what pads a
    keyed all-gather (`all_gather(..., key=...)`) crosses the wire and is
    charged to `padding`.
    """

    def __init__(self, rank, size, timeout_seconds, bucket_bytes) -> None:
        super().__init__(rank, size, timeout_seconds, bucket_bytes)
        self._hvd = import_horovod()
        if self._hvd.is_initialized():
            if (self._hvd.rank(), self._hvd.size()) != (rank, size):
                raise ValueError(
                    f"Horovod runs this process as rank {self._hvd.rank()} "
                    f"of {self._hvd.size()}. Received: rank={rank}, "
                    f"size={size}. Pass Horovod's rank and size."
                )
        elif size > 1:
            raise ValueError(
                "Horovod is not initialized. Call "
                "`keras_hybrid.comm.horovod_communicator.init_horovod` (or "
                "build a `HybridStrategy(engine='horovod')`) first. "
                f"Received: rank={rank}, size={size}"
            )
        self._alltoall = StableAlltoall(self._hvd, rank, size, PATHS)
        self._gather_marks = high_water.HighWaterMarks(
            "keras_hybrid_allgather_rows"
        )

    def _all_reduce_flat(self, tensors, op, path):
        flat = tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)
        hvd_op = self._hvd.Max if op == "max" else self._hvd.Sum
        reduced = self._hvd.allreduce(flat, op=hvd_op)
        if op == "mean":
            # The TF engine's final op: integer division truncates.
            size = tf.constant(self.size, flat.dtype)
            reduced = tf.raw_ops.Div(x=reduced, y=size)
        nbytes = byte_sizes.bytes_of(flat)
        self.stats.record(path, 2 * (self.size - 1) * nbytes // self.size)
        return split_flat(reduced, tensors)

    def all_gather(self, tensor, path="control", key=None):
        tensor = tf.convert_to_tensor(tensor)
        rows = tf.shape(tensor)[0]
        if self.size == 1:
            return tf.identity(tensor), tf.reshape(rows, [1])
        if key is not None and not tf.executing_eagerly():
            return self._gather_stable(tensor, path, key)
        sizes = self._gather_fixed(tf.reshape(rows, [1]), "control")
        gathered = self._hvd.allgather(tensor)
        row_bytes = byte_sizes.row_bytes(tensor)
        self.stats.record(
            path,
            byte_sizes.i64((self.size - 1) * rows) * row_bytes,
            received_bytes=byte_sizes.i64(tf.reduce_sum(sizes) - rows)
            * row_bytes,
        )
        return gathered, sizes

    def _gather_stable(self, tensor, path, key):
        """`all_gather` padded to `key`'s high-water mark of rows, so that
        Horovod's response cache holds from step to step; the padding
        crosses the wire (charged to `padding`) and is dropped here."""
        rows = tf.shape(tensor, out_type=tf.int32)[0]
        cap = self._gather_marks.capacity(key, rows)
        padding = tf.zeros(
            tf.concat(
                [[cap - rows], tf.shape(tensor, out_type=tf.int32)[1:]], 0
            ),
            tensor.dtype,
        )
        counts = self._gather_fixed(tf.stack([rows, cap]), "control")
        counts = tf.reshape(counts, [self.size, 2])
        sizes, caps = counts[:, 0], counts[:, 1]
        gathered = self._hvd.allgather(tf.concat([tensor, padding], axis=0))
        # Position of each gathered row within its worker's block.
        starts = tf.repeat(tf.cumsum(caps, exclusive=True), caps)
        position = tf.range(tf.reduce_sum(caps)) - starts
        gathered = tf.boolean_mask(gathered, position < tf.repeat(sizes, caps))
        if tensor.shape.rank is not None:
            gathered.set_shape([None, *tensor.shape[1:]])
        row_bytes = byte_sizes.row_bytes(tensor)
        peers = self.size - 1
        received = tf.reduce_sum(sizes) - rows
        self.stats.record(
            path,
            byte_sizes.i64(peers * rows) * row_bytes,
            received_bytes=byte_sizes.i64(received) * row_bytes,
        )
        self.stats.record(
            "padding",
            byte_sizes.i64(peers * (cap - rows)) * row_bytes,
            calls=0,
            received_bytes=byte_sizes.i64(tf.reduce_sum(caps) - cap - received)
            * row_bytes,
        )
        return gathered, sizes

    def _gather_fixed(self, tensor, path):
        """All-gather of a tensor whose shape is the same on all workers."""
        gathered = self._hvd.allgather(tensor)
        self.stats.record(
            path, (self.size - 1) * byte_sizes.static_bytes(tensor)
        )
        return gathered

    def _all_to_all_fixed(self, tensor, path):
        """Row j of `tensor` to worker j (equal splits)."""
        received = self._hvd.alltoall(tensor)
        self.stats.record(
            path,
            (self.size - 1) * byte_sizes.static_bytes(tensor) // self.size,
        )
        return received

    def all_to_all(self, tensor, send_counts, path="control", plan=None):
        del plan  # Horovod agrees on the counts itself.
        tensor = tf.convert_to_tensor(tensor)
        send_counts = tf.cast(tf.reshape(send_counts, [self.size]), tf.int32)
        if self.size == 1:
            return tf.identity(tensor), send_counts
        received, recv_counts = self._alltoall(tensor, send_counts, path)
        sent_rows = tf.reduce_sum(send_counts) - send_counts[self.rank]
        got_rows = tf.reduce_sum(recv_counts) - recv_counts[self.rank]
        row_bytes = byte_sizes.row_bytes(tensor)
        self.stats.record(
            path,
            byte_sizes.i64(sent_rows) * row_bytes,
            received_bytes=byte_sizes.i64(got_rows) * row_bytes,
        )
        return received, recv_counts

    def exchange_packed_ids(self, ids, part_counts, flag, weights, check):
        """One `hvd.alltoall` for the plan and the ids: the block for each
        peer starts with a header (its part counts and this worker's
        flag), so no control collective runs before the ids move. Each
        Horovod collective is a negotiation round and a background cycle,
        and on loopback that round, not the bytes, is the cost.

        A bad id is still a valid row (the partition's bijection maps every
        int to one), so sending it is safe; `check` then gates the rows
        asked, and every worker fails before the pull.
        """
        ids = tf.convert_to_tensor(ids)
        if self.size == 1 or ids.shape.rank != 1:
            return super().exchange_packed_ids(
                ids, part_counts, flag, weights, check
            )
        counts = tf.cast(part_counts, tf.int32)  # [size, P]
        mats = tf.cast(tf.stack(weights, axis=1), tf.int32)  # [P, K]
        sent = tf.matmul(counts, mats)  # [size, K]
        header = tf.concat(
            [counts, tf.fill([self.size, 1], tf.cast(flag, tf.int32))], 1
        )
        width = header.shape[1]
        blocks = tf.split(ids, sent[:, 0], num=self.size)
        message = tf.concat(
            [
                part
                for j in range(self.size)
                for part in (tf.cast(header[j], ids.dtype), blocks[j])
            ],
            axis=0,
        )
        received, recv_counts = self._alltoall(
            message, sent[:, 0] + width, "ids"
        )
        parts = tf.split(received, recv_counts, num=self.size)
        got = tf.cast(tf.stack([p[:width] for p in parts]), tf.int32)
        with tf.control_dependencies(check(got[:, -1])):
            asked = tf.concat([p[width:] for p in parts], axis=0)
        self._record_packed_ids(ids, sent[:, 0], recv_counts - width, width)
        recv_parts = got[:, :-1]
        plans = _plans(sent, tf.matmul(recv_parts, mats), got[:, -1])
        return plans, recv_parts, asked

    def _record_packed_ids(self, ids, send_counts, recv_counts, width):
        """Charges the ids to `ids` and the headers to `control`, which
        issued no collective of its own (`calls=0`)."""
        row = byte_sizes.row_bytes(ids)
        self.stats.record(
            "ids",
            byte_sizes.i64(tf.reduce_sum(send_counts) - send_counts[self.rank])
            * row,
            received_bytes=byte_sizes.i64(
                tf.reduce_sum(recv_counts) - recv_counts[self.rank]
            )
            * row,
        )
        self.stats.record(
            "control", (self.size - 1) * width * ids.dtype.size, calls=0
        )

    def broadcast(self, tensor, root=0, path="control"):
        tensor = tf.convert_to_tensor(tensor)
        if self.size == 1:
            return tf.identity(tensor)
        nbytes = byte_sizes.static_bytes(tensor)
        if self.rank == root:
            self.stats.record(path, (self.size - 1) * nbytes, received_bytes=0)
        else:  # receivers send nothing; one call
            self.stats.record(path, 0, received_bytes=nbytes)
        return self._hvd.broadcast(tensor, root_rank=root)


def _plans(sent, received, flags) -> list:
    """One `ExchangePlan` per column of `sent` and `received` (int32
    `[size, K]`: rows sent to and received from each worker)."""
    plans = []
    for k in range(sent.shape[1]):
        peak = tf.maximum(
            tf.reduce_max(sent[:, k]), tf.reduce_max(received[:, k])
        )
        # Horovod sizes each exchange itself: the capacity is only local.
        cap = capacity.capacity_for(peak)
        plans.append(ExchangePlan(sent[:, k], received[:, k], cap, flags))
    return plans
