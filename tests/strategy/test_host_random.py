"""A worker takes rank 0's Python and NumPy random states (`host_random`).

Keras shuffles a `PyDataset` with Python's `random`: without a shared
state, each worker shuffled its batches in another order.
"""

import random

import numpy as np
import tensorflow as tf

from keras_hybrid.elastic import joining
from keras_hybrid.strategy import host_random
from keras_hybrid.testing import TestCase


class _Broadcast:
    """Rank `rank`'s side of a broadcast whose root sent `sent`."""

    def __init__(self, rank: int, sent: list) -> None:
        self.rank, self._sent = rank, list(sent)

    def broadcast(self, tensor, root):
        assert root == 0
        return self._sent.pop(0) if self.rank != 0 else tensor


class _Recorder:
    rank = 0

    def __init__(self) -> None:
        self.sent = []

    def broadcast(self, tensor, root):
        self.sent.append(tensor)
        return tensor


class HostRandomTest(TestCase):
    def setUp(self) -> None:
        super().setUp()
        saved = random.getstate(), np.random.get_state()
        self.addCleanup(
            lambda: (random.setstate(saved[0]), np.random.set_state(saved[1]))
        )

    def _rank0_states(self, seed: int):
        """What rank 0 sends, and what it draws next."""
        random.seed(seed)
        np.random.seed(seed)
        random.gauss(0, 1)  # leaves a cached Gaussian behind
        np.random.normal()
        recorder = _Recorder()
        host_random.share_from_rank0(recorder)
        order = list(range(32))
        random.shuffle(order)
        return recorder.sent, order, np.random.normal(size=3)

    def test_another_rank_draws_what_rank_0_draws(self):
        sent, order, normals = self._rank0_states(seed=1)
        random.seed(2)  # another process's state
        np.random.seed(2)
        host_random.share_from_rank0(_Broadcast(1, sent))
        mine = list(range(32))
        random.shuffle(mine)
        self.assertEqual(mine, order)
        np.testing.assert_array_equal(np.random.normal(size=3), normals)

    def test_rank_0_keeps_its_own_stream(self):
        _, order, _ = self._rank0_states(seed=3)
        random.seed(3)
        random.gauss(0, 1)
        expected = list(range(32))
        random.shuffle(expected)
        self.assertEqual(order, expected)


class GlobalSeedTest(TestCase):
    def setUp(self) -> None:
        super().setUp()
        tf.random.set_seed(None)
        self.addCleanup(tf.random.set_seed, None)

    def _order(self):
        data = tf.data.Dataset.range(16).shuffle(16, seed=1)
        return list(data.as_numpy_iterator())

    def test_unset_is_the_seed_of_ops_that_name_their_own(self):
        alone = self._order()
        tf.random.set_seed(host_random.global_seed())
        self.assertEqual(self._order(), alone)

    def test_a_script_seed_is_kept(self):
        tf.random.set_seed(1234)
        self.assertEqual(host_random.global_seed(), 1234)

    def test_an_elastic_worker_takes_it_without_a_collective(self):
        alone = self._order()
        joining.share_seed()
        self.assertIsNotNone(tf.compat.v1.random.get_seed(None)[0])
        self.assertEqual(self._order(), alone)
