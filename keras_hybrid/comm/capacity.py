"""Capacity buckets for collectives whose sizes change from step to step.

TensorFlow's V2 collectives remember the tensor shape of each instance key
for the life of the process, so a variable-sized exchange is padded up to a
capacity from a fixed ladder (`ladder`, in NumPy, which the cost library
prices with), and each capacity gets its own instance key. This module
looks counts up on it in a graph.
"""

import numpy as np
import tensorflow as tf

from keras_hybrid.comm import ladder

# A step's exchanges look the buckets of all peers up at once, per
# direction (`TFCommunicator._pair_buckets`): one `LowerBound` and one
# `gather` over `ladder.CAPACITIES`, a handful of graph ops.


def bucket_index(count: tf.Tensor) -> tf.Tensor:
    """Returns the index of the smallest capacity >= `count` (int32)."""
    count = tf.cast(count, tf.int64)
    # `tf.searchsorted` wraps this op in a dozen reshapes of its own.
    index = tf.raw_ops.LowerBound(
        sorted_inputs=tf.constant(ladder.CAPACITIES[None]),
        values=tf.reshape(count, [1, -1]),
        out_type=tf.int32,
    )
    return tf.reshape(index, tf.shape(count))


def bucket_capacity(index: tf.Tensor) -> tf.Tensor:
    """Returns the capacity of bucket `index` (int32)."""
    return tf.gather(tf.constant(ladder.CAPACITIES.astype(np.int32)), index)


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
