"""Capacity buckets for collectives whose sizes change from step to step.

TensorFlow's V2 collectives remember the tensor shape of each instance key
for the life of the process, so a variable-sized exchange is padded up to a
capacity from a fixed ladder, and each capacity gets its own instance key.
Counts up to 32 are exact; above that the ladder has 16 steps per power of
two, so padding is less than 1/16 of the payload. Counts must be below
2**30.
"""

import numpy as np
import tensorflow as tf

_EXACT = 32
_STEPS = 16
# Buckets of counts below 2**30: 0..32 exact, then exponents 1..25 of 16
# steps (the last bucket is 2**30 itself).
NUM_BUCKETS = _EXACT + 1 + _STEPS * 25


def _ladder() -> np.ndarray:
    """Capacity of every bucket, ascending: `i` up to 32, then mantissas
    17..32 shifted left by exponents 1..25."""
    rel = np.arange(NUM_BUCKETS - _EXACT - 1, dtype=np.int64)
    scaled = (rel % _STEPS + 17) << (rel // _STEPS + 1)
    return np.concatenate([np.arange(_EXACT + 1, dtype=np.int64), scaled])


# A step's exchanges look a bucket up per pair and direction, so the lookup
# is one `LowerBound` and one `gather` over this constant: a handful of
# graph ops where arithmetic on the bits took about thirty.
_CAPACITIES = _ladder()


def bucket_index(count: tf.Tensor) -> tf.Tensor:
    """Returns the index of the smallest capacity >= `count` (int32)."""
    count = tf.cast(count, tf.int64)
    # `tf.searchsorted` wraps this op in a dozen reshapes of its own.
    index = tf.raw_ops.LowerBound(
        sorted_inputs=tf.constant(_CAPACITIES[None]),
        values=tf.reshape(count, [1, -1]),
        out_type=tf.int32,
    )
    return tf.reshape(index, tf.shape(count))


def bucket_capacity(index: tf.Tensor) -> tf.Tensor:
    """Returns the capacity of bucket `index` (int32)."""
    return tf.gather(tf.constant(_CAPACITIES.astype(np.int32)), index)


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


def capacities_of(counts, pairwise: bool = False) -> np.ndarray:
    """`capacity_for` (with `pairwise`, `pair_capacity_for`) of an array of
    counts, in NumPy: what cost models price, with no TF op per call.

    Args:
        counts: Array-like of ints below 2**30.
        pairwise: Bool. Whether each count is a pairwise block's (never
            fewer than one row). Defaults to `False`.

    Returns:
        An int64 array of `counts`'s shape.
    """
    counts = np.asarray(counts, np.int64)
    cap = _CAPACITIES[np.searchsorted(_CAPACITIES, counts, side="left")]
    return np.maximum(cap, 1) if pairwise else cap
