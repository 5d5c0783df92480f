"""`StableAlltoall`: `hvd.alltoall` whose input keeps its shape across steps.

Horovod caches the negotiated response of each collective by its name and
input shape. A collective that finds its cached entry on every rank is
agreed on with one bit-wise all-reduce in the background cycle; one whose
shape changed invalidates the entry, and the cycle then runs a second
bit-wise all-reduce, gathers every rank's request on the coordinator and
broadcasts the responses. The sparse exchange's all-to-alls carry as many
rows as the step's unique ids, which change every step, so each of them
took that slow path in each of a step's dependent rounds: measured, it
doubled the CPU time of Horovod's background thread per step.

So inside a traced step the input is padded up to a high-water mark of
its rows (on the capacity ladder, `comm.capacity`), which stops moving
once the largest step has been seen. The padding rows are part of the
block this worker sends *to itself*: Horovod copies that block locally,
so nothing extra goes on the wire, and the rows are dropped again from
the block received from itself. Eager calls (one-off moves) are not
padded.
"""

import tensorflow as tf

from keras_hybrid.comm import high_water


class StableAlltoall:
    """Runs `hvd.alltoall` with a stable input shape (module docstring).

    Args:
        hvd: The `horovod.tensorflow` module.
        rank: Int. This worker's rank.
        size: Int. Number of workers.
        keys: Tuple of strings. One high-water mark is kept per key (the
            traffic paths); calls of one key share it.
    """

    def __init__(self, hvd, rank: int, size: int, keys: tuple) -> None:
        self._hvd = hvd
        self._rank = rank
        self._size = size
        self._marks = high_water.HighWaterMarks(
            "keras_hybrid_alltoall_rows", keys
        )

    def __call__(self, tensor, splits, key: str) -> tuple:
        """Sends `splits[j]` consecutive rows of `tensor` to worker j.

        Args:
            tensor: Rows grouped by destination rank.
            splits: Int32 vector `[size]`.
            key: String. Which high-water mark to pad to.

        Returns:
            `(received, recv_counts)`: the rows received by source rank,
            and int32 counts per source, without any padding.
        """
        splits = tf.cast(splits, tf.int32)
        if tf.executing_eagerly():
            received, recv = self._hvd.alltoall(tensor, splits=splits)
            return received, tf.cast(recv, tf.int32)
        rows = tf.shape(tensor, out_type=tf.int32)[0]
        pad = self._marks.capacity(key, rows) - rows
        mine = tf.one_hot(self._rank, self._size, dtype=tf.int32) * pad
        # The own block ends here; the padding goes right after it.
        end = tf.reduce_sum(splits[: self._rank + 1])
        padding = tf.zeros(
            tf.concat([[pad], tf.shape(tensor, out_type=tf.int32)[1:]], 0),
            tensor.dtype,
        )
        padded = tf.concat([tensor[:end], padding, tensor[end:]], axis=0)
        received, recv = self._hvd.alltoall(padded, splits=splits + mine)
        recv = tf.cast(recv, tf.int32)
        got_end = tf.reduce_sum(recv[: self._rank + 1])
        received = tf.concat(
            [received[: got_end - pad], received[got_end:]], axis=0
        )
        if tensor.shape.rank is not None:
            received.set_shape([None, *tensor.shape[1:]])
        return received, recv - mine
