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
    """Bytes of one row (all but the first axis), as an int64 tensor: one
    constant when the row's shape is known at trace time."""
    if tensor.shape[1:].is_fully_defined():
        row = tensor.shape[1:].num_elements()
        return tf.constant(row * tensor.dtype.size, tf.int64)
    row = tf.reduce_prod(tf.shape(tensor)[1:])
    return tf.cast(row, tf.int64) * tensor.dtype.size


def i64(x) -> tf.Tensor:
    """`x` as int64: a constant for a Python int, else a cast."""
    if isinstance(x, int):
        return tf.constant(x, tf.int64)
    return tf.cast(x, tf.int64)


def int64_vector(values: list) -> tf.Tensor:
    """An int64 vector of Python ints and int scalar tensors, in as few
    graph ops as it takes: one constant when all are ints."""
    if not any(tf.is_tensor(v) for v in values):
        return tf.constant([int(v) for v in values], tf.int64)
    return tf.stack([_scalar(v) if tf.is_tensor(v) else int(v) for v in values])


def _scalar(tensor: tf.Tensor) -> tf.Tensor:
    if tensor.shape.rank != 0:
        tensor = tf.reshape(tensor, [])  # e.g. a count of shape [1]
    return i64(tensor)
