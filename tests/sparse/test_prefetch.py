"""`prefetch.discover`: which lookups' ids are computed ahead, and how."""

import types

import numpy as np
import tensorflow as tf

from keras_hybrid.sparse import prefetch
from keras_hybrid.testing import TestCase


def _table(path):
    return types.SimpleNamespace(path=path)


class PrefetchTest(TestCase):
    def setUp(self):
        super().setUp()
        self.a, self.b, self.c = _table("a"), _table("b"), _table("c")
        self.rows = tf.Variable(tf.reshape(tf.range(20.0), [10, 2]))

    def _lookup(self, table, ids):
        stand_in = tf.gather(self.rows, ids)
        if prefetch.active():
            prefetch.record(table, ids, stand_in)
        return stand_in

    def _step(self, x, offset):
        first = self._lookup(self.a, tf.math.floormod(x * 3 + offset, 10))
        again = self._lookup(self.a, tf.reverse(x, [0]))
        follow = tf.cast(tf.argmax(first, axis=-1), tf.int32)
        self._lookup(self.b, follow)  # ids from a lookup's rows
        noise = tf.random.uniform(tf.shape(x), 0, 10, tf.int32)
        self._lookup(self.c, noise)  # ids from a stateful random op
        return tf.reduce_sum(first) + tf.reduce_sum(again)

    def test_finds_the_ids_computable_ahead_and_computes_them(self):
        x = tf.constant([1, 4, 7], tf.int32)
        plan = prefetch.discover(self._step, (x,), {"offset": 2})
        got = [(c.table.path, c.index, c.prefetched) for c in plan.calls]
        self.assertEqual(
            got,
            [("a", 0, True), ("a", 1, True), ("b", 0, False), ("c", 0, False)],
        )
        ids = plan.ids_fn((x,), {"offset": 2})
        np.testing.assert_array_equal(ids[0], [5, 4, 3])
        np.testing.assert_array_equal(ids[1], [7, 4, 1])
        # In a traced step, from the step's own inputs.
        other = tf.constant([0, 1, 2], tf.int32)
        traced = tf.function(lambda v: plan.ids_fn((v,), {"offset": 2}))
        np.testing.assert_array_equal(traced(other)[0], [2, 5, 8])

    def test_nothing_to_prefetch(self):
        def step(x):
            return self._lookup(self.b, tf.random.uniform([3], 0, 10, tf.int32))

        plan = prefetch.discover(step, (tf.constant([1]),), {})
        self.assertEqual([c.prefetched for c in plan.calls], [False])
        self.assertIsNone(plan.ids_fn)
        self.assertEqual(plan.prefetched(), [])

    def test_gather_inside_a_branch_is_not_prefetched(self):
        def step(x):
            return tf.cond(
                tf.reduce_sum(x) > 0,
                lambda: self._lookup(self.a, x),
                lambda: tf.zeros([3, 2]),
            )

        plan = prefetch.discover(step, (tf.constant([1, 2, 3]),), {})
        self.assertEqual([c.prefetched for c in plan.calls], [False])
        self.assertFalse(prefetch.active())
