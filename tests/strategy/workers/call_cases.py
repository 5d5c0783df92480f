"""Models and data of the `predict` and call-fence workers, shared with the
tests that compute one-process references."""

import keras
import numpy as np
import tensorflow as tf

VOCAB = 200
SEQ = 4
ROWS = 50  # with BATCH 16 the last global batch has 2 rows
BATCH = 16
SHAPES = ("single", "list", "dict")


def make_ids(rows: int = ROWS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, VOCAB, size=(rows, SEQ)).astype("int32")


def build_model(shape: str) -> keras.Model:
    """A partitioned table (under a multi-worker strategy) and a dense head
    with one output, a list of two, or a dict of two."""
    keras.utils.set_random_seed(5)
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    x = keras.layers.Embedding(VOCAB, 8, name="table")(ids)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    logits = keras.layers.Dense(3, name="logits")(x)
    if shape == "single":
        return keras.Model(ids, logits, name=shape)
    score = keras.layers.Dense(1, name="score")(x)
    if shape == "list":
        return keras.Model(ids, [logits, score], name=shape)
    return keras.Model(ids, {"logits": logits, "score": score}, name=shape)


def predictions(model: keras.Model) -> dict:
    """Every way of predicting the tests compare, on the same ids."""
    ids = make_ids()
    data = tf.data.Dataset.from_tensor_slices(ids).batch(BATCH)
    return {
        "numpy": model.predict(ids, batch_size=BATCH, verbose=0),
        "dataset": model.predict(data, verbose=0),
        "on_batch": model.predict_on_batch(ids[:11]),
    }
