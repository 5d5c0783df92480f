"""Capacity buckets for collectives whose sizes change from step to step.

TensorFlow's V2 collectives remember the tensor shape of each instance key
for the life of the process, so a variable-sized exchange is padded up to a
capacity from a fixed ladder, and each capacity gets its own instance key.
Counts up to 32 are exact; above that the ladder has 16 steps per power of
two, so padding is less than 1/16 of the payload. Counts must be below
2**30.
"""

import tensorflow as tf

_EXACT = 32
_STEPS = 16
# Buckets of counts below 2**30: 0..32 exact, then exponents 1..25 of 16
# steps (the last bucket is 2**30 itself).
NUM_BUCKETS = _EXACT + 1 + _STEPS * 25


def _bit_length(x: tf.Tensor) -> tf.Tensor:
    """Bit length of positive int64 `x`, exact (float log, then fixed)."""
    guess = (
        tf.cast(
            tf.math.floor(
                tf.math.log(tf.cast(x, tf.float64))
                / tf.math.log(tf.constant(2.0, tf.float64))
            ),
            tf.int64,
        )
        + 1
    )
    one = tf.ones_like(guess)
    too_big = tf.bitwise.right_shift(x, guess - one) == 0
    guess = tf.where(too_big, guess - 1, guess)
    too_small = tf.bitwise.right_shift(x, guess) != 0
    return tf.where(too_small, guess + 1, guess)


def bucket_index(count: tf.Tensor) -> tf.Tensor:
    """Returns the index of the smallest capacity >= `count` (int32)."""
    count = tf.cast(count, tf.int64)
    safe = tf.maximum(count - 1, _EXACT)
    exponent = _bit_length(safe) - 5  # (count - 1) >> e lies in [16, 31].
    mantissa = tf.bitwise.right_shift(safe, exponent) + 1
    index = _EXACT + 1 + (exponent - 1) * _STEPS + (mantissa - 17)
    return tf.cast(tf.where(count <= _EXACT, count, index), tf.int32)


def bucket_capacity(index: tf.Tensor) -> tf.Tensor:
    """Returns the capacity of bucket `index` (int32)."""
    index = tf.cast(index, tf.int64)
    rel = tf.maximum(index - (_EXACT + 1), 0)
    exponent = rel // _STEPS + 1
    mantissa = rel % _STEPS + 17
    capacity = tf.bitwise.left_shift(mantissa, exponent)
    return tf.cast(tf.where(index <= _EXACT, index, capacity), tf.int32)


def pair_capacity(index: tf.Tensor) -> tf.Tensor:
    """Rows of a pairwise block whose count is in bucket `index`: the
    bucket's capacity, but at least one row. An empty tensor sent through
    `CollectiveBcastSendV2`/`RecvV2` crashes TF 2.21 with SIGSEGV, so a pair
    with nothing to send sends one row of padding (int32)."""
    return tf.maximum(bucket_capacity(index), 1)


def pair_capacity_for(count: tf.Tensor) -> tf.Tensor:
    """`pair_capacity` of the bucket that holds `count`."""
    return pair_capacity(bucket_index(count))


def capacity_for(count: tf.Tensor) -> tf.Tensor:
    """Returns the smallest capacity on the ladder that holds `count`."""
    return bucket_capacity(bucket_index(count))
