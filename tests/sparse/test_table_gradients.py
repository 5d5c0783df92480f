"""The registry that marks a partitioned table's pushed gradient."""

import gc

import tensorflow as tf

from keras_hybrid.sparse import table_gradients
from keras_hybrid.testing import TestCase


class _Table:
    """What `make` reads of a `ShardedTable`: 3 local rows of a 6x2 table."""

    local_shape = (3, 2)
    full_shape = (6, 2)

    def local_shape_tensor(self):
        return tf.constant(self.local_shape, tf.int64)


class TableGradientsTest(TestCase):
    def test_pushed_gradient_names_its_table(self):
        table = _Table()
        grad = table_gradients.make(table, tf.ones((2, 2)), tf.constant([0, 2]))
        self.assertIs(table_gradients.table_of(grad), table)
        self.assertEqual(grad.dense_shape.numpy().tolist(), [3, 2])

    def test_other_gradients_have_no_table(self):
        plain = tf.IndexedSlices(
            tf.ones((1, 2)), tf.constant([0]), tf.constant([3, 2], tf.int64)
        )
        self.assertIsNone(table_gradients.table_of(plain))
        self.assertIsNone(table_gradients.table_of(tf.ones((3, 2))))
        no_shape = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]))
        self.assertIsNone(table_gradients.table_of(no_shape))

    def test_aggregate_sums_per_id_and_keeps_the_table(self):
        table = _Table()
        grad = table_gradients.make(
            table,
            tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
            tf.constant([2, 0, 2]),
        )
        summed = table_gradients.aggregate(grad)
        self.assertIs(table_gradients.table_of(summed), table)
        self.assertEqual(summed.indices.numpy().tolist(), [2, 0])
        self.assertAllClose(summed.values, [[6.0, 8.0], [3.0, 4.0]])

    def test_entries_go_with_their_tensor(self):
        before = table_gradients.registered()
        grad = table_gradients.make(_Table(), tf.ones((1, 2)), tf.constant([1]))
        self.assertEqual(table_gradients.registered(), before + 1)
        del grad
        gc.collect()
        self.assertEqual(table_gradients.registered(), before)

    def test_a_reused_id_is_not_mistaken_for_a_table_gradient(self):
        grad = table_gradients.make(_Table(), tf.ones((1, 2)), tf.constant([1]))
        other = tf.constant([3, 2], tf.int64)
        # As if `other` had been allocated where a dead tensor was.
        key = id(other)
        self.addCleanup(table_gradients._registry.pop, key, None)
        table_gradients._registry[key] = table_gradients._registry[
            id(grad.dense_shape)
        ]
        fake = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]), other)
        self.assertIsNone(table_gradients.table_of(fake))
