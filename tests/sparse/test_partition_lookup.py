"""`PartitionLookup`: the virtual-shard map a traced lookup reads from
variables, so that a resize does not trace the step again."""

import numpy as np
import tensorflow as tf

from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.sparse.partition_lookup import PartitionLookup
from keras_hybrid.testing import TestCase


class PartitionLookupTest(TestCase):
    def setUp(self):
        super().setUp()
        self.part = RowPartition.create(5000, 3)
        self.ids = np.arange(5000, dtype=np.int64)

    def _check(self, lookup, part, fn=None):
        shard_of = fn[0] if fn else lookup.shard_of
        local_index = fn[1] if fn else lookup.local_index
        ids = tf.constant(self.ids)
        shards = shard_of(ids)
        self.assertEqual(shards.dtype, tf.int32)
        np.testing.assert_array_equal(shards.numpy(), part.shard_of(self.ids))
        np.testing.assert_array_equal(
            local_index(ids).numpy(), part.local_index(self.ids)
        )

    def test_equals_the_partition(self):
        lookup = PartitionLookup(self.part, "t")
        self._check(lookup, self.part)
        # By hand: id 0 is in virtual shard p(0) % V, p(0) = offset.
        virtual = self.part.offset % self.part.num_virtual
        self.assertEqual(
            int(lookup.shard_of(tf.constant([0], tf.int64))[0]),
            virtual % 3,
        )

    def test_a_traced_lookup_follows_a_resize_without_tracing_again(self):
        lookup = PartitionLookup(self.part, "t")
        shard_of = tf.function(lookup.shard_of)
        local_index = tf.function(lookup.local_index)
        self._check(lookup, self.part, (shard_of, local_index))
        for size in (4, 2, 5):
            part = self.part.resized(size)
            lookup.update(part)
            self._check(lookup, part, (shard_of, local_index))
        self.assertEqual(shard_of.experimental_get_tracing_count(), 1)
        self.assertEqual(local_index.experimental_get_tracing_count(), 1)

    def test_another_bijection_is_refused(self):
        lookup = PartitionLookup(self.part, "t")
        with self.assertRaisesRegex(ValueError, "must keep its rows"):
            lookup.update(RowPartition.create(4000, 3))
