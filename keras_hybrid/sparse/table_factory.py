"""Creates the `ShardedTable` of a sparse variable or of its optimizer slot.

Called from the strategy's variable creator with the `tf.Variable` keyword
arguments and what `_compat.keras.variable_info` found out about the Keras
variable. The rows are drawn here, shard by shard (see `table_init`); the
creator's own `initial_value` (the whole table) is never called.
"""

import tensorflow as tf
from absl import logging

from keras_hybrid.sparse import table_init
from keras_hybrid.sparse.keras_gathers import read_rows_through
from keras_hybrid.sparse.sharded_table import ShardedTable

# tf.Variable keywords a table keeps; `initial_value` and `shape` are its
# own, and placement is the strategy's device.
_KEPT = ("trainable", "name", "dtype", "distribute_strategy")


def create_table(
    variable, initializer, path, entry, kwargs, communicator
) -> ShardedTable:
    """The shard of sparse variable `entry` (a `VariablePlan`) of Keras
    `variable`, drawn with `initializer`; `path` is its unique path."""
    table_init.check_initializer(
        initializer, path, tuple(variable.shape), variable.dtype
    )
    seed = _agreed_seed(initializer, communicator)
    table = _make(
        variable,
        initializer,
        kwargs,
        path,
        entry.partition,
        communicator,
        role="table",
        seed=seed,
    )
    read_rows_through(variable)
    logging.log_first_n(
        logging.INFO,
        "keras-hybrid: %s is partitioned over %d shards (%d rows here).",
        20,
        path,
        communicator.size,
        table.local_rows,
    )
    return table


def create_slot(reference: ShardedTable, info, kwargs, communicator):
    """Optimizer state of `reference`, partitioned like it; `info` is
    `(keras variable, initializer)` or None."""
    if info is None or tuple(info[0].shape) != reference.full_shape:
        raise NotImplementedError(
            "An optimizer variable placed next to partitioned table "
            f"{reference.path!r} does not have the table's shape "
            f"{reference.full_shape}, so it cannot be partitioned with it. "
            "Use an optimizer whose state is per element (SGD, Adam, "
            "AdamW, Adagrad, RMSprop, ...), or keep the table dense with "
            f"`HybridStrategy(variable_kinds={{{reference.path!r}: "
            "'dense'}})`."
        )
    variable, initializer = info
    slot = _make(
        variable,
        initializer,
        kwargs,
        variable.path,
        reference.partition,
        communicator,
        role="slot",
        seed=table_init.base_seed(initializer),
    )
    reference.add_slot(slot)
    return slot


def _make(
    variable, initializer, kwargs, path, partition, communicator, role, seed
):
    full_shape = tuple(variable.shape)
    dtype = variable.dtype

    def initial_rows():
        return table_init.shard_rows(
            initializer,
            full_shape,
            dtype,
            partition,
            communicator.rank,
            seed,
        )

    return ShardedTable(
        path=path,
        full_shape=full_shape,
        partition=partition,
        communicator=communicator,
        role=role,
        initial_value=initial_rows,
        # Rows per shard change when workers join or leave.
        shape=tf.TensorShape([None, *full_shape[1:]]),
        **{k: kwargs[k] for k in _KEPT if k in kwargs},
    )


def _agreed_seed(initializer, communicator) -> int:
    """The initializer's seed, made equal on all workers (rank 0's)."""
    seed = tf.constant(table_init.base_seed(initializer), tf.int64)
    return int(communicator.broadcast(seed, root=0, path="control"))
