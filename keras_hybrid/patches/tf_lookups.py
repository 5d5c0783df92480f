"""TensorFlow's embedding lookups read a Keras variable by rows.

`tf.nn.embedding_lookup` (and every TF function built on it:
`tf.nn.sampled_softmax_loss`, `tf.nn.nce_loss`,
`tf.nn.embedding_lookup_sparse`) keeps a `tf.Variable` as it is but turns
any other object, a `keras.Variable` included, into a tensor first: a
read of the whole table, then a gather from it. A layer ported from
`tf.keras`, whose weights were `tf.Variable`s, therefore read its table
whole under Keras 3, and the plan kept such a table replicated (or, if
it was partitioned, refused the whole read).

While a multi-worker `HybridStrategy` is open, the module-level
`embedding_lookup` those functions call (the private
`embedding_ops.embedding_lookup`, reached through `_compat.tf`) hands a
single Keras variable that the strategy reads by rows
(`sparse.keras_gathers`: a partitioned table, or a replicated one read
only through gathers) to `tf.gather`, which calls that `sparse_read`. `max_norm`
clips the rows as TensorFlow does. Anything else goes to TensorFlow's
function unchanged.
"""

import functools

import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.sparse import keras_gathers


def _by_rows(embedding_lookup):
    @functools.wraps(embedding_lookup)
    def lookup(
        params,
        ids,
        partition_strategy="mod",
        name=None,
        validate_indices=True,
        max_norm=None,
    ):
        table = _routed_table(params)
        if table is None:
            return embedding_lookup(
                params,
                ids,
                partition_strategy,
                name,
                validate_indices,
                max_norm,
            )
        with tf.name_scope(name or "embedding_lookup"):
            ids = tf.convert_to_tensor(ids)
            rows = tf.gather(table, ids)
            if max_norm is None:
                return rows
            return tf.clip_by_norm(rows, max_norm, axes=_row_axes(ids, rows))

    return lookup


def _routed_table(params):
    """The one Keras variable in `params` that the strategy reads by rows,
    or None."""
    if isinstance(params, list) and len(params) == 1:
        params = params[0]
    return params if keras_gathers.reads_rows(params) else None


def _row_axes(ids, rows):
    """The axes of one looked-up row, as TensorFlow's `max_norm` clips."""
    if ids.shape.rank is not None and rows.shape.rank is not None:
        return list(range(ids.shape.rank, rows.shape.rank))
    return tf.range(tf.rank(ids), tf.rank(rows))


PATCHES = PatchSet(
    "tf_lookups",
    (
        Patch(
            tf_compat.embedding_lookup_module(),
            "embedding_lookup",
            _by_rows,
        ),
    ),
)
