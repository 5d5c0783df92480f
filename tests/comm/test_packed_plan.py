"""`Communicator.plan_packed_exchange` on one worker: the plans of every
weighting of the parts (the multi-worker exchange is tested by the fused
lookups of tests/sparse/test_sparse_training_multiprocess.py)."""

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import make_communicator
from keras_hybrid.testing import TestCase


class PackedPlanTest(TestCase):
    def test_one_worker_plans_every_weighting_of_the_parts(self):
        comm = make_communicator("tf", 0, 1, 10.0, 1024)
        plans, parts = comm.plan_packed_exchange(
            tf.constant([[3, 5]]),
            6,
            [tf.constant([1, 1]), tf.constant([2, 0]), tf.constant([0, 7])],
        )
        np.testing.assert_array_equal(parts, [[3, 5]])
        self.assertEqual([int(p.send_counts[0]) for p in plans], [8, 6, 35])
        self.assertEqual([int(p.recv_counts[0]) for p in plans], [8, 6, 35])
        # Capacities are ladder steps: exact up to 32, then 16 per octave.
        self.assertEqual([int(p.capacity) for p in plans], [8, 6, 36])
        self.assertEqual(int(plans[0].flags[0]), 6)
