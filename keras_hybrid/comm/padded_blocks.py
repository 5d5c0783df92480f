"""Zero-padded blocks of rows, the layout of a padded all-to-all: each
peer's rows in a block of the same `cap` rows (`TFCommunicator`)."""

import tensorflow as tf


def total(caps: list):
    """Sum of block sizes (int32), 0 for none."""
    return tf.add_n(caps) if caps else tf.constant(0, tf.int32)


def pad_rows(tensor: tf.Tensor, cap: tf.Tensor) -> tf.Tensor:
    """`tensor` with zero rows appended up to `cap` rows."""
    rows = tf.shape(tensor, out_type=tf.int32)[0]
    if tensor.shape.rank is None:
        paddings = tf.concat(
            [[[0, cap - rows]], tf.zeros([tf.rank(tensor) - 1, 2], tf.int32)],
            axis=0,
        )
    else:
        # The other axes' zeros are one constant with the static rank.
        paddings = tf.pad(
            [[0, cap - rows]], [[0, tensor.shape.rank - 1], [0, 0]]
        )
    return tf.pad(tensor, paddings)


def to_blocks(tensor, counts, cap):
    """`tensor`'s rows, grouped by destination (`counts[j]` rows for
    worker j, `len(counts)` a tensor), as `[len(counts), cap, ...]`: one
    block of `cap` rows per worker, zero-padded."""
    num = tf.size(counts)
    starts = tf.cumsum(counts, exclusive=True)
    dest = tf.repeat(tf.range(num), counts)
    target = (
        dest * cap + tf.range(tf.shape(tensor)[0]) - tf.gather(starts, dest)
    )
    row_shape = tf.shape(tensor)[1:]
    flat = tf.scatter_nd(
        target[:, None], tensor, tf.concat([[num * cap], row_shape], axis=0)
    )
    # AllToAllV2 wants the group size as the first dimension.
    return tf.reshape(flat, tf.concat([[num, cap], row_shape], axis=0))


def from_blocks(blocks, counts, cap):
    """The first `counts[j]` rows of each block `j` of `cap` rows
    (`blocks` is `[len(counts), cap, ...]`)."""
    blocks = tf.reshape(blocks, tf.concat([[-1], tf.shape(blocks)[2:]], axis=0))
    starts = tf.range(tf.size(counts)) * cap
    index = tf.ragged.range(starts, starts + counts).flat_values
    return tf.gather(blocks, index)


def unpad(blocks, counts, cap, size):
    """Keeps the first counts[j] rows of each of the `size` blocks."""
    parts = tf.split(blocks, size * [cap], num=size)
    return tf.concat([p[: counts[j]] for j, p in enumerate(parts)], axis=0)
