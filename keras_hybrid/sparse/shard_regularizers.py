"""Regularizers and constraints of a partitioned table, shard by shard.

A table's regularizer and constraint can run on the owner's rows only if
they work row by row: the penalty of the whole table is the sum of its
rows' penalties (L1, L2, L1L2, any per-element or per-row penalty), and
the constraint of a row depends on that row alone (`NonNeg`,
`MaxNorm(axis=1)`, `UnitNorm(axis=1)`). Both are checked by a probe on
random rows when a provisional table's placement is decided; a penalty or
constraint that fails it (an orthogonality penalty, `MaxNorm(axis=0)`,
which bounds columns across all rows) keeps the table dense.

- The penalty becomes `RowRegularizer`: each owner applies the user's
  regularizer to its rows, and one scalar all-reduce gives every worker the
  whole table's penalty. Its gradient stays on the owner's rows: Keras
  scales each worker's loss by its share of the global batch (`1/N` when
  the batch splits evenly) and a replicated table's gradient would be
  summed over the workers, so the owner takes the workers' upstream
  gradients summed (a second scalar all-reduce, in the backward pass),
  which is exactly the replicated table's gradient.
- A dynamic table's rows are each worker's own keys' rows:
  `LocalRowsRegularizer` sums their penalties over the workers the same
  way, and pushes the gradient to the rows that hold it.
- The constraint is taken off the Keras variable (so Keras' optimizer
  does not apply it to the whole table) and applied by the strategy to the
  owner's rows right after each optimizer update of the table.
"""

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.plan import use_discovery
from keras_hybrid.sparse import sharded_table
from keras_hybrid.sparse import table_gradients

_PROBE_ROWS = 3
_PROBE_SEED = 1234


class RowRegularizer:
    """The user's row-wise `regularizer`, applied to this shard's rows.

    Args:
        regularizer: Callable. The user's regularizer.
        table: The `ShardedTable` it penalizes.
        communicator: The job's `Communicator`.
    """

    def __init__(self, regularizer, table, communicator) -> None:
        self.regularizer = regularizer
        self.table = table
        self.communicator = communicator

    def __call__(self, value):
        del value  # the Keras variable: its rows live on the shards
        if use_discovery.active() or keras_compat.in_symbolic_scope():
            with sharded_table.shard_view():
                return self.regularizer(tf.convert_to_tensor(self.table))
        return _shard_penalty(self.table, self.regularizer, self.communicator)

    def get_config(self) -> dict:
        return self.regularizer.get_config()


class LocalRowsRegularizer(RowRegularizer):
    """The user's row-wise `regularizer` on a dynamic table, whose rows on
    each worker are its own keys': the penalty is the sum over the
    workers' rows, and each worker's rows take its gradient, marked as
    pushed (the strategy does not sum it over workers), as one process
    holding every row would.

    Args:
        regularizer: Callable. The user's regularizer, a sum over rows.
        table: The `DynamicTable` it penalizes.
        communicator: The job's `Communicator`.
    """

    def __call__(self, value):
        if self.communicator.width < 2 or keras_compat.in_symbolic_scope():
            return self.regularizer(value)
        storage = keras_compat.variable_storage(self.table.embeddings)
        return _summed_penalty(
            self.table,
            self.regularizer,
            self.communicator,
            lambda: tf.convert_to_tensor(storage),
        )


def _shard_penalty(table, regularizer, comm):
    def read():
        with sharded_table.shard_view():
            return tf.convert_to_tensor(table)

    # `custom_gradient` passes the variables it saw through an IdentityN;
    # they must read as the local rows, not as a whole-table stand-in.
    with sharded_table.shard_view():
        return _summed_penalty(table, regularizer, comm, read)


def _summed_penalty(table, regularizer, comm, read):
    """The sum over workers of `regularizer` on the rows each holds
    (`read()`); its gradient is each worker's rows', pushed."""

    @tf.custom_gradient
    def penalty(anchor):
        rows = read()
        with tf.GradientTape() as tape:
            tape.watch(rows)
            local = regularizer(rows)
        d_rows = tape.gradient(local, rows)
        total = comm.all_reduce([local], op="sum", path="dense")[0]

        def grad(upstream, variables=None):
            del variables
            # Each worker's upstream is its share of the global batch times
            # what all share (1, or a loss scale): the rows' gradient is
            # their sum over the workers, the current members of an
            # elastic group, whose slices may differ in size.
            scale = comm.all_reduce([upstream], op="sum", path="dense")[0]
            scale = tf.cast(scale, d_rows.dtype)
            ids = tf.range(tf.shape(d_rows)[0], dtype=tf.int64)
            pushed = table_gradients.make(table, scale * d_rows, ids)
            return tf.zeros_like(anchor), [pushed]

        return total, grad

    return tf_compat.custom_gradient_owned_by_graph(penalty, tf.constant(0.0))


def install(placed, communicator) -> str:
    """Makes the regularizer and constraint of provisional table `placed`
    row-wise. Returns why they cannot be, or "" if they can."""
    variable, table = placed.keras_variable, placed.storage
    row_shape = tuple(table.full_shape[1:])
    regularizer = variable.regularizer
    if regularizer is not None and not isinstance(regularizer, RowRegularizer):
        if not sums_over_rows(regularizer, row_shape):
            return f"regularizer {_name(regularizer)} is not a sum over rows"
        placed.regularizer = regularizer
        variable.regularizer = RowRegularizer(regularizer, table, communicator)
    constraint = variable.constraint
    if constraint is not None:
        if not acts_per_row(constraint, row_shape):
            uninstall(placed)
            return f"constraint {_name(constraint)} mixes rows"
        placed.constraint = constraint
        variable.constraint = None
        table.row_constraint = constraint
    return ""


def uninstall(placed) -> None:
    """Gives the Keras variable back its own regularizer and constraint."""
    variable = placed.keras_variable
    if placed.regularizer is not None:
        variable.regularizer = placed.regularizer
        placed.regularizer = None
    if placed.constraint is not None:
        variable.constraint = placed.constraint
        placed.storage.row_constraint = None
        placed.constraint = None


def _probe_rows(row_shape):
    rng = np.random.default_rng(_PROBE_SEED)
    shape = (_PROBE_ROWS, *row_shape)
    a = rng.normal(size=shape).astype("float32")
    b = rng.normal(size=shape).astype("float32")
    return a, b, np.concatenate([a, b])


def sums_over_rows(regularizer, row_shape) -> bool:
    """Whether the penalty of `regularizer` on a table is the sum of its
    rows' penalties (L1, L2, L1L2), probed on random rows."""
    a, b, both = _probe_rows(row_shape)
    with tf.init_scope():
        parts = float(regularizer(tf.constant(a))) + float(
            regularizer(tf.constant(b))
        )
        whole = float(regularizer(tf.constant(both)))
    return bool(np.isclose(parts, whole, rtol=1e-5, atol=1e-6))


def acts_per_row(constraint, row_shape) -> bool:
    """Whether `constraint` maps each row of a table by itself (`NonNeg`,
    `UnitNorm(axis=1)`, `MaxNorm(axis=1)`), probed on random rows: applied
    to a shard, it gives the whole table's rows."""
    a, b, both = _probe_rows(row_shape)
    with tf.init_scope():
        parts = np.concatenate(
            [np.asarray(constraint(tf.constant(x))) for x in (a, b)]
        )
        whole = np.asarray(constraint(tf.constant(both)))
    return bool(np.allclose(parts, whole, rtol=1e-5, atol=1e-6))


def _name(obj) -> str:
    return type(obj).__name__
