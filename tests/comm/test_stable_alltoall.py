"""`StableAlltoall`: the input Horovod sees keeps its shape across steps.

A fake `hvd.alltoall` stands for a peer that sends back exactly what it
was sent (each worker receives block j from worker j, and the fake peer's
blocks are this worker's), and it records the rows it was given. So every
expected value is the input itself, and the padding is plain to count.
"""

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import capacity
from keras_hybrid.comm.stable_alltoall import StableAlltoall
from keras_hybrid.testing import TestCase


class _EchoHorovod:
    """`alltoall(tensor, splits)` that returns its input and splits, and
    keeps the number of rows it was last given in `rows`."""

    def __init__(self) -> None:
        self.rows = tf.Variable(-1, dtype=tf.int32, trainable=False)

    def alltoall(self, tensor, splits):
        rows = tf.shape(tensor, out_type=tf.int32)[0]
        with tf.control_dependencies([self.rows.assign(rows)]):
            return tf.identity(tensor), tf.identity(splits)


def _input(counts, rank_base=0):
    """Rows `[sum(counts), 2]`, block j of `counts[j]` rows, values that
    name their block and position."""
    rows = [
        [[100 * j + i + rank_base, -(100 * j + i)] for i in range(c)]
        for j, c in enumerate(counts)
    ]
    return np.concatenate(
        [np.array(r, np.float32).reshape(-1, 2) for r in rows]
    )


class StableAlltoallTest(TestCase):
    def _exchange(self, rank):
        hvd = _EchoHorovod()
        stable = StableAlltoall(hvd, rank=rank, size=2, keys=("ids",))

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, 2], tf.float32),
                tf.TensorSpec([2], tf.int32),
            ]
        )
        def exchange(x, splits):
            return stable(x, splits, "ids")

        return hvd, exchange

    def test_padding_goes_to_the_own_block_and_is_dropped(self):
        for rank in (0, 1):
            hvd, exchange = self._exchange(rank)
            # 40 rows: the ladder's capacity for 40 is 40, then 10 rows
            # are padded up to 40 too, whichever block is this worker's.
            for counts in ((25, 15), (3, 7), (0, 0)):
                x = _input(counts)
                received, recv = exchange(x, tf.constant(counts, tf.int32))
                np.testing.assert_array_equal(received.numpy(), x)
                np.testing.assert_array_equal(recv.numpy(), counts)
                self.assertEqual(int(hvd.rows.numpy()), 40, (rank, counts))

    def test_the_shape_grows_to_the_ladder_and_never_shrinks(self):
        hvd, exchange = self._exchange(rank=1)
        seen = []
        for total in (5, 33, 40, 101, 60, 2):
            counts = (total // 2, total - total // 2)
            x = _input(counts)
            received, recv = exchange(x, tf.constant(counts, tf.int32))
            np.testing.assert_array_equal(received.numpy(), x)
            np.testing.assert_array_equal(recv.numpy(), counts)
            seen.append(int(hvd.rows.numpy()))
        # Exact up to 32, then 16 steps per power of two: 33 -> 34,
        # 101 -> 104; 60 and 2 rows keep the 104 of the largest step.
        self.assertEqual(seen, [5, 34, 40, 104, 104, 104])
        self.assertEqual(
            int(capacity.capacity_for(tf.constant(101)).numpy()), 104
        )

    def test_eager_calls_are_not_padded(self):
        hvd = _EchoHorovod()
        stable = StableAlltoall(hvd, rank=0, size=2, keys=("ids",))
        x = _input((2, 1))
        received, recv = stable(x, tf.constant([2, 1]), "ids")
        np.testing.assert_array_equal(received.numpy(), x)
        np.testing.assert_array_equal(recv.numpy(), [2, 1])
        self.assertEqual(int(hvd.rows.numpy()), 3)
