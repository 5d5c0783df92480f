"""Sizes in bytes of what a collective sends, for the `CommStats` charge."""

import tensorflow as tf


def static_bytes(tensor: tf.Tensor) -> int:
    """Bytes of a tensor whose shape is fully known at trace time."""
    return tensor.shape.num_elements() * tensor.dtype.size


def bytes_of(tensor: tf.Tensor):
    """Bytes of a tensor: an int if its shape is known at trace time, else
    an int64 tensor (a gradient whose static shape a reshape lost)."""
    if tensor.shape.is_fully_defined():
        return static_bytes(tensor)
    return tf.size(tensor, out_type=tf.int64) * tensor.dtype.size


def row_bytes(tensor: tf.Tensor) -> tf.Tensor:
    """Bytes of one row (all but the first axis), as an int64 tensor."""
    row = tf.reduce_prod(tf.shape(tensor)[1:])
    return tf.cast(row, tf.int64) * tensor.dtype.size


def i64(x) -> tf.Tensor:
    return tf.cast(x, tf.int64)
