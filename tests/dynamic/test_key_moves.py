"""The pieces of a dynamic table's key moves that need no other worker:
the owners' variable and the packing of a key's fields (the moves
themselves run in `tests/elastic/test_dynamic_multiprocess.py`)."""

import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic import key_moves
from keras_hybrid.dynamic.key_owners import KeyOwners
from keras_hybrid.dynamic.owner_map import OwnerMap
from keras_hybrid.sharding.shard_assignment import ShardAssignment
from keras_hybrid.testing import TestCase


class OwnerMapTest(TestCase):
    def test_owners_follow_an_update_in_a_traced_function(self):
        owners = OwnerMap(KeyOwners.balanced(2), "t")
        keys = tf.constant([7, -3, 2**62, 11], tf.int64)
        read = tf.function(owners.owner_of)
        before = read(keys).numpy()
        np.testing.assert_array_equal(
            before, KeyOwners.balanced(2).owner_of(keys).numpy()
        )
        three = owners.assignment.resized(3)
        owners.update(three)
        # The same trace reads the new owners.
        np.testing.assert_array_equal(
            read(keys).numpy(), KeyOwners(three).owner_of(keys).numpy()
        )
        self.assertEqual(read.experimental_get_tracing_count(), 1)

    def test_refuses_other_virtual_shards(self):
        owners = OwnerMap(KeyOwners.balanced(2), "t")
        with self.assertRaisesRegex(ValueError, "keep its 1024 virtual"):
            owners.update(ShardAssignment.balanced(512, 2))


class PackTest(TestCase):
    def test_round_trip_of_mixed_fields(self):
        rng = np.random.default_rng(0)
        for n in (0, 1, 5):
            arrays = [
                rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
                rng.normal(size=(n, 3)).astype(np.float32),
                rng.normal(size=(n, 1)).astype(np.float16),  # padded
                rng.normal(size=(n, 2)).astype(np.float64),
            ]
            packed = key_moves._pack(arrays)
            self.assertEqual(packed.dtype, np.int32)
            self.assertEqual(packed.shape, (n, 2 + 3 + 1 + 4))
            for got, want in zip(
                key_moves._unpack(packed, arrays), arrays, strict=True
            ):
                np.testing.assert_array_equal(got, want)
                self.assertEqual(got.dtype, want.dtype)
