"""A static-`Embedding` reference for `DynamicEmbedding`: the same
admission rule, applied ahead of training in plain Python."""

import keras
import numpy as np
import tensorflow as tf


def admitted_rows(batches, admit_after: int):
    """Replays admission over `batches` (arrays of keys, in training
    order, no eviction). Returns `(rows per batch, keys in row order)`:
    each position's reference row (-1: not admitted yet)."""
    index, seen, out = {}, {}, []
    for batch in batches:
        flat = batch.reshape(-1).tolist()
        for key in dict.fromkeys(flat):  # unique, first-seen order
            if key not in index:
                seen[key] = seen.get(key, 0) + 1
                if seen[key] >= admit_after:
                    index[key] = len(index)
        rows = [index.get(key, -1) for key in flat]
        out.append(np.array(rows, np.int64).reshape(batch.shape))
    return out, list(index)


def static_model(initial_rows: np.ndarray, seq_len: int) -> keras.Model:
    """Reads row `max(i, 0)` of a static Embedding, zeroed where i < 0
    (the default row); then Flatten and Dense(1), as the test model."""
    rows = keras.Input(shape=(seq_len,), dtype="int64")
    embedding = keras.layers.Embedding(
        initial_rows.shape[0],
        initial_rows.shape[1],
        embeddings_initializer=keras.initializers.Constant(initial_rows),
    )
    values = embedding(keras.ops.maximum(rows, 0))
    found = keras.ops.expand_dims(keras.ops.cast(rows >= 0, "float32"), -1)
    x = keras.layers.Flatten()(values * found)
    return keras.Model(rows, keras.layers.Dense(1, name="head")(x))


class DistinctRowsEmbedding(keras.layers.Embedding):
    """An Embedding that reads each distinct row once per call, so its
    gradient holds one summed entry per row: dense-gradient semantics,
    which a dynamic table has under `HybridStrategy` (its rows' gradients
    are summed per key before the optimizer sees them)."""

    def call(self, inputs):
        flat = tf.reshape(tf.cast(inputs, "int64"), [-1])
        unique, where = tf.unique(flat)
        rows = tf.gather(keras.ops.take(self.embeddings, unique, axis=0), where)
        shape = tf.concat([tf.shape(inputs), [self.output_dim]], 0)
        return tf.reshape(rows, shape)


def distinct_rows_model(initial_rows: np.ndarray, seq_len: int):
    """`static_model` with a `DistinctRowsEmbedding`."""
    rows = keras.Input(shape=(seq_len,), dtype="int64")
    embedding = DistinctRowsEmbedding(
        initial_rows.shape[0],
        initial_rows.shape[1],
        embeddings_initializer=keras.initializers.Constant(initial_rows),
    )
    values = embedding(keras.ops.maximum(rows, 0))
    found = keras.ops.expand_dims(keras.ops.cast(rows >= 0, "float32"), -1)
    x = keras.layers.Flatten()(values * found)
    return keras.Model(rows, keras.layers.Dense(1, name="head")(x))
