"""`KeyOwners`: which worker holds each key of a dynamic table."""

import numpy as np
import tensorflow as tf

from keras_hybrid.dynamic import key_hash
from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.dynamic.key_owners import NUM_VIRTUAL
from keras_hybrid.dynamic.key_owners import KeyOwners
from keras_hybrid.testing.test_case import TestCase


def _keys(count=20_000, seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(
        rng.integers(-(2**63), 2**63 - 1, size=count, dtype=np.int64)
    )


class KeyOwnersTest(TestCase):
    def test_virtual_shard_does_not_depend_on_workers(self):
        keys = _keys()
        virtual = KeyOwners.balanced(1).virtual_shard_of(keys).numpy()
        for workers in (2, 3, 4):
            owners = KeyOwners.balanced(workers)
            np.testing.assert_array_equal(
                owners.virtual_shard_of(keys), virtual
            )
            np.testing.assert_array_equal(
                owners.owner_of(keys), virtual % workers
            )

    def test_keys_spread_evenly(self):
        owner = KeyOwners.balanced(4).owner_of(_keys()).numpy()
        share = np.bincount(owner, minlength=4) / owner.size
        # 20 000 keys: a binomial share's sd is 0.3 %.
        self.assertAllClose(share, [0.25] * 4, atol=0.02)
        virtual = KeyOwners.balanced(4).virtual_shard_of(_keys()).numpy()
        self.assertGreater(len(np.unique(virtual)), 0.99 * NUM_VIRTUAL)

    def test_consecutive_keys_spread(self):
        keys = tf.range(4000, dtype=tf.int64)
        owner = KeyOwners.balanced(4).owner_of(keys).numpy()
        share = np.bincount(owner, minlength=4) / owner.size
        self.assertAllClose(share, [0.25] * 4, atol=0.04)

    def test_string_keys(self):
        keys = tf.constant([b"a", b"b", b"a"])
        owner = KeyOwners.balanced(3).owner_of(keys).numpy()
        self.assertEqual(owner[0], owner[2])
        self.assertTrue(((owner >= 0) & (owner < 3)).all())

    def test_a_string_and_its_hash_are_one_key(self):
        """Under the strategy a string key stands for its hash
        (`key_hash.string_keys`); one process keys on the string. Both
        must give the key the same initial row and owner, and the hash
        must be what `keras.layers.Hashing` computes (the stock copy's
        first layer)."""
        import keras

        strings = tf.constant([b"a", b"user:17", b"", b"k-9"])
        hashed = key_hash.string_keys(strings)
        np.testing.assert_array_equal(
            hashed,
            keras.layers.Hashing(num_bins=key_hash.STRING_BINS)(strings),
        )
        rows = InitialRows("uniform", seed=5)
        np.testing.assert_array_equal(rows(strings, 8), rows(hashed, 8))
        owners = KeyOwners.balanced(4)
        np.testing.assert_array_equal(
            owners.virtual_shard_of(strings), owners.virtual_shard_of(hashed)
        )
