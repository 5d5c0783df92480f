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

Each read checks its ids first, as a partitioned table's lookup does: an
id outside the table stops the step with a message naming the table, the
id, the worker and the valid range (TensorFlow's own `indices[53,0] =
50005 is not in [0, 50000)` names none of them, and a GPU gather returns
zeros instead).
"""

import tensorflow as tf

from keras_hybrid.sparse import keras_gathers


def install(keras_var, path: str = "", communicator=None) -> None:
    """Makes gathers of Keras variable `keras_var` read rows only.

    Args:
        keras_var: `keras.Variable`. A table the plan keeps replicated.
        path: String. Its path, for the bad-id message.
        communicator: Optional `Communicator`. Its rank names the worker
            in the bad-id message.
    """

    def check(storage, indices):
        rank = 0 if communicator is None else communicator.rank
        return check_ids(path, storage, rank, indices)

    keras_gathers.read_rows_through(keras_var, check)


def check_ids(path: str, storage, rank: int, indices):
    """An assertion that every id is a row of `storage`."""
    num_rows = storage.shape[0]
    flat = tf.reshape(tf.cast(indices, tf.int64), [-1])
    bad = tf.logical_or(flat < 0, flat >= num_rows)
    first = tf.gather(flat, tf.argmax(tf.cast(bad, tf.int32)))
    message = tf.strings.format(
        f"Table {path!r} (replicated) was looked up with id {{}} on worker "
        f"{rank}; valid ids are [0, {num_rows}).",
        first,
    )
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [message])


def uninstall(keras_var) -> None:
    """Gathers of `keras_var` read it whole again (TensorFlow's way)."""
    keras_gathers.stop_reading_rows(keras_var)
