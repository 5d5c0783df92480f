"""Gradients of partitioned tables, as they reach the optimizer.

The push (see `lookup`) delivers to each owner the gradient rows of the ids
it owns, from every worker: an `IndexedSlices` over *local* row indices,
already summed across workers but with one entry per (worker, id). Its
`dense_shape` tensor is registered here with the table, so the strategy's
all-reduce can tell it apart from other `IndexedSlices` and not reduce it a
second time. TensorFlow keeps the first gradient's `dense_shape` object
when it adds the gradients of several lookups of one table, so the
registration survives that too.

The registry maps `id(dense_shape)` to weak references to the tensor and
its table; a lookup checks identity (ids are reused after a tensor dies),
and an entry is dropped when its tensor is collected. Nothing here keeps
a dropped model's table or traced step alive: the custom gradient's
function belongs to the step's graph
(`_compat.tf.custom_gradient_owned_by_graph`), not to TF's global
registry.
"""

import dataclasses
import weakref

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A registered `dense_shape` tensor and its table (both weakly)."""

    dense_shape: weakref.ref
    table: weakref.ref


# Dict operations are atomic; no lock, since entries are also dropped from
# weakref callbacks, which may run during any allocation.
_registry: dict[int, _Entry] = {}


def make(table, values: tf.Tensor, local_ids: tf.Tensor) -> tf.IndexedSlices:
    """The owner's gradient of `table`: rows `values` at `local_ids`."""
    # Read at run time: the shard's row count changes with a resize.
    dense_shape = table.local_shape_tensor()
    _register(dense_shape, table)
    return tf.IndexedSlices(values, local_ids, dense_shape)


def marked_read(table, local_ids: tf.Tensor, gather) -> tf.Tensor:
    """`gather(local_ids)`, rows of `table` on its owner, whose gradient is
    the owner's marked gradient of `table` at `local_ids` (`make`)."""

    @tf.custom_gradient
    def read(local_ids):
        rows = gather(local_ids)

        def grad(d_rows, variables):
            del variables
            d_rows = tf.convert_to_tensor(d_rows)
            return None, [make(table, d_rows, local_ids)]

        return rows, grad

    return tf_compat.custom_gradient_owned_by_graph(read, local_ids)


def table_of(value):
    """The table whose pushed gradient `value` is, or None."""
    if not isinstance(value, tf.IndexedSlices) or value.dense_shape is None:
        return None
    entry = _registry.get(id(value.dense_shape))
    if entry is None or entry.dense_shape() is not value.dense_shape:
        return None
    return entry.table()


def aggregate(value: tf.IndexedSlices) -> tf.IndexedSlices:
    """Sums the rows pushed for the same id (one entry per id), so
    optimizers that square gradients follow dense-gradient semantics."""
    ids, slot = tf.unique(value.indices)
    rows = tf.math.unsorted_segment_sum(value.values, slot, tf.size(ids))
    return tf.IndexedSlices(rows, ids, value.dense_shape)


def registered() -> int:
    """Int. How many live `dense_shape` tensors are registered (for
    tests)."""
    return len(_registry)


def _register(dense_shape: tf.Tensor, table) -> None:
    key = id(dense_shape)

    def drop(ref: weakref.ref) -> None:
        entry = _registry.get(key)
        # A newer tensor may already hold the same id.
        if entry is not None and entry.dense_shape is ref:
            del _registry[key]

    _registry[key] = _Entry(weakref.ref(dense_shape, drop), weakref.ref(table))
