"""Row reads of a replicated table: a gather reads the rows it needs, not
the whole table.

Keras' `ops.take` hands `tf.gather` the Keras variable, which has no
`sparse_read`, so TensorFlow reads the variable whole and gathers from
that. Once the optimizer has applied an `IndexedSlices` gradient (a
scatter), TensorFlow keeps the variable in copy-on-read mode, and every
whole read copies it: each step of an `Embedding` copies its whole table
(25.6 MB for 100 000 x 64 floats; on this project's machine it halved the
steps per second of a one-table model). A partitioned table already reads
by row (`ShardedTable.sparse_read`). For a table the plan keeps dense and
that the model reads only through gathers, `install` gives the Keras
variable a `sparse_read` that gathers from its storage (`ResourceGather`):
the same rows and the same `IndexedSlices` gradient, without the copy. A
table also read whole (a tied output projection) is left alone: there a
gather would put the variable in copy-on-read mode for the whole reads.
"""

import weakref

from keras_hybrid._compat import keras as keras_compat


def install(keras_var) -> None:
    """Makes gathers of Keras variable `keras_var` read rows only."""
    ref = weakref.ref(keras_var)

    def sparse_read(indices, name=None):
        variable = ref()
        storage = keras_compat.variable_storage(variable)
        rows = storage.sparse_read(indices, name=name)
        return keras_compat.autocast_read(variable, rows)

    keras_var.sparse_read = sparse_read


def uninstall(keras_var) -> None:
    """Gathers of `keras_var` read it whole again (TensorFlow's way)."""
    vars(keras_var).pop("sparse_read", None)
