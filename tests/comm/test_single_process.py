"""A communicator of one worker: every collective is the identity."""

import re
import sys
from unittest import mock

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import PATHS
from keras_hybrid.comm import engines
from keras_hybrid.comm import make_communicator
from keras_hybrid.comm import padded_blocks
from keras_hybrid.testing import TestCase


class SingleProcessTest(TestCase):
    def setUp(self):
        super().setUp()
        self.comm = make_communicator("tf", 0, 1, 10.0, 1024)
        self.tensors = [
            tf.constant([1.5, -2.0, 3.0]),
            tf.reshape(tf.range(6, dtype=tf.int32), [2, 3]),
            tf.constant([[0.25]], tf.float64),
        ]

    def _assert_same(self, got, want):
        self.assertEqual(got.dtype, want.dtype)
        np.testing.assert_array_equal(got.numpy(), want.numpy())

    def _run_all(self):
        out = {}
        for op in ("sum", "mean", "max"):
            out[op] = self.comm.all_reduce(self.tensors, op=op)
        out["gather"] = self.comm.all_gather(self.tensors[1])
        out["a2a"] = self.comm.all_to_all(self.tensors[1], [2])
        out["bcast"] = self.comm.broadcast(self.tensors[0])
        self.comm.barrier()
        return out

    def _check(self, out):
        for op in ("sum", "mean", "max"):
            for got, want in zip(out[op], self.tensors, strict=True):
                self._assert_same(got, want)
        gathered, sizes = out["gather"]
        self._assert_same(gathered, self.tensors[1])
        self._assert_same(sizes, tf.constant([2], tf.int32))
        received, counts = out["a2a"]
        self._assert_same(received, self.tensors[1])
        self._assert_same(counts, tf.constant([2], tf.int32))
        self._assert_same(out["bcast"], self.tensors[0])

    def test_every_op_returns_its_input_eagerly(self):
        self._check(self._run_all())

    def test_every_op_returns_its_input_in_tf_function(self):
        self._check(tf.function(self._run_all)())

    def test_nothing_is_counted(self):
        self._run_all()
        tf.function(self._run_all)()
        zeros = {
            path: {"bytes": 0, "received_bytes": 0, "calls": 0}
            for path in PATHS
        }
        self.assertEqual(self.comm.stats.snapshot(), zeros)

    def test_unknown_engine_raises(self):
        with self.assertRaisesRegex(
            ValueError, re.escape(str(engines.ENGINES))
        ):
            make_communicator("nope", 0, 1, 10.0, 1024)

    def test_horovod_engine_without_horovod_gives_the_build_command(self):
        # Hidden even where it is installed (`make test-horovod`).
        hidden = {"horovod": None, "horovod.tensorflow": None}
        with mock.patch.dict(sys.modules, hidden):
            with self.assertRaisesRegex(
                ImportError, "pip install --no-build-isolation horovod==0.28.1"
            ):
                make_communicator("horovod", 0, 1, 10.0, 1024)

    def test_unknown_reduce_op_raises(self):
        with self.assertRaisesRegex(ValueError, "op='min'"):
            self.comm.all_reduce(self.tensors, op="min")

    def test_unknown_exchange_raises(self):
        self.comm.exchange = "ring"
        with self.assertRaisesRegex(ValueError, "Received: exchange='ring'"):
            self.comm.all_to_all(self.tensors[1], [2])


class PaddedBlocksTest(TestCase):
    """The padded all-to-all's blocks, whose number is a tensor (the
    elastic group's size when the step runs)."""

    def test_blocks_pad_each_destination_and_unpad(self):
        rows = tf.constant([[1.0], [2.0], [3.0], [4.0], [5.0]])
        counts = tf.constant([2, 0, 3])
        blocks = padded_blocks.to_blocks(rows, counts, tf.constant(3))
        self.assertEqual(blocks.shape.as_list(), [3, 3, 1])
        np.testing.assert_array_equal(
            blocks.numpy()[..., 0], [[1, 2, 0], [0, 0, 0], [3, 4, 5]]
        )
        back = padded_blocks.from_blocks(blocks, counts, tf.constant(3))
        np.testing.assert_array_equal(back.numpy(), rows.numpy())
