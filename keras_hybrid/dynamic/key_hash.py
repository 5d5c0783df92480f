"""Stateless 64-bit hashes of keys: the same on every worker and run.

A key's initial row and (with several workers) its virtual shard come
from these hashes, so they depend on the key and a seed only, never on
arrival order, capacity or worker count.
"""

import tensorflow as tf

# A string key's integer: its FarmHash fingerprint modulo this, which is
# what `keras.layers.Hashing(num_bins=STRING_BINS)` computes, so a stock
# Keras model can hash strings as the layer does.
STRING_BINS = 2**63 - 1

# splitmix64 (Steele et al., 2014): its finaliser mixes every input bit
# into every output bit.
_GOLDEN = 0x9E3779B97F4A7C15
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB


def string_keys(keys: tf.Tensor) -> tf.Tensor:
    """The int64 in `[0, STRING_BINS)` of each string key: what stands for
    it on several workers, where keys travel as int64."""
    return tf.strings.to_hash_bucket_fast(keys, STRING_BINS)


def key_bits(keys: tf.Tensor) -> tf.Tensor:
    """The 64 bits of each key as `uint64`: an integer key's own bits, a
    string key's `string_keys` integer's. A string and its integer thus
    get the same initial row and virtual shard."""
    if keys.dtype == tf.string:
        keys = string_keys(keys)
    return tf.bitcast(tf.cast(keys, tf.int64), tf.uint64)


def mix(bits: tf.Tensor, salt: int | tf.Tensor) -> tf.Tensor:
    """splitmix64 of `bits + (salt + 1) * golden` (`uint64`, broadcast)."""
    salt = tf.cast(salt, tf.uint64) + tf.constant(1, tf.uint64)
    z = bits + salt * tf.constant(_GOLDEN, tf.uint64)
    z = _xor_shift(z, 30) * tf.constant(_MIX_1, tf.uint64)
    z = _xor_shift(z, 27) * tf.constant(_MIX_2, tf.uint64)
    return _xor_shift(z, 31)


def uniform(bits: tf.Tensor) -> tf.Tensor:
    """`float64` in `[0, 1)` from the top 53 of 64 hashed bits."""
    top = tf.bitwise.right_shift(bits, tf.constant(11, tf.uint64))
    return tf.cast(top, tf.float64) * (2.0**-53)


def _xor_shift(z: tf.Tensor, shift: int) -> tf.Tensor:
    return tf.bitwise.bitwise_xor(
        z, tf.bitwise.right_shift(z, tf.constant(shift, tf.uint64))
    )
