"""Gathers of a Keras variable read rows of its storage.

`tf.gather` and `tf.nn.embedding_lookup` look for `sparse_read` on the
object they are given, the Keras variable, which has none: TensorFlow then
reads the variable whole and gathers from that. `read_rows_through` gives
it one that reads only the rows asked for, from the variable's storage of
the moment (a partitioned table's `ShardedTable`, which an elastic
recovery may replace, or a replicated table's `tf.Variable`), cast as
Keras casts the variable's reads in an autocast scope (a custom layer
under `mixed_float16` reads float16 rows), as without a strategy.
"""

import weakref

import keras
import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat


def read_rows_through(variable, check=None) -> None:
    """Makes gathers of Keras `variable` read rows of its storage.

    Args:
        variable: `keras.Variable`.
        check: Optional callable `(storage, indices) -> op` run before each
            read (a replicated table's id check).
    """
    ref = weakref.ref(variable)

    def sparse_read(indices, name=None):
        keras_var = ref()
        storage = keras_compat.variable_storage(keras_var)
        checks = [] if check is None else [check(storage, indices)]
        with tf.control_dependencies(checks):
            rows = storage.sparse_read(indices, name=name)
        return keras_compat.autocast_read(keras_var, rows)

    variable.sparse_read = sparse_read


def reads_rows(variable) -> bool:
    """Whether gathers of `variable` read rows (`read_rows_through`)."""
    return isinstance(variable, keras.Variable) and "sparse_read" in vars(
        variable
    )


def stop_reading_rows(variable) -> None:
    """Gathers of `variable` read it whole again (TensorFlow's way)."""
    vars(variable).pop("sparse_read", None)
