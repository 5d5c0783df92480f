"""Gradients of partitioned tables, as they reach the optimizer.

The push (see `lookup`) delivers to each owner the gradient rows of the ids
it owns, from every worker: an `IndexedSlices` over *local* row indices,
already summed across workers but with one entry per (worker, id). Its
`dense_shape` tensor carries the table, so the strategy's all-reduce can
tell it apart from other `IndexedSlices` and not reduce it a second time.
TensorFlow keeps the first gradient's `dense_shape` when it adds the
gradients of several lookups of one table, so the mark survives that too.
"""

import tensorflow as tf

_MARK = "_keras_hybrid_table"


def make(table, values: tf.Tensor, local_ids: tf.Tensor) -> tf.IndexedSlices:
    """The owner's gradient of `table`: rows `values` at `local_ids`."""
    local_shape = [table.shape[0], *table.full_shape[1:]]
    dense_shape = tf.constant(local_shape, dtype=tf.int64)
    setattr(dense_shape, _MARK, table)
    return tf.IndexedSlices(values, local_ids, dense_shape)


def table_of(value):
    """The table whose pushed gradient `value` is, or None."""
    if not isinstance(value, tf.IndexedSlices) or value.dense_shape is None:
        return None
    return getattr(value.dense_shape, _MARK, None)


def aggregate(value: tf.IndexedSlices) -> tf.IndexedSlices:
    """Sums the rows pushed for the same id (one entry per id), so
    optimizers that square gradients follow dense-gradient semantics."""
    ids, slot = tf.unique(value.indices)
    rows = tf.math.unsorted_segment_sum(value.values, slot, tf.size(ids))
    return tf.IndexedSlices(rows, ids, value.dense_shape)
