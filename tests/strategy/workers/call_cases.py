"""Models and data of the `predict` and call-fence workers, shared with the
tests that compute one-process references; `on_workers` is the pool
scenario of `predict` on every rank."""

import os

import keras
import numpy as np
import tensorflow as tf

import keras_hybrid as kh
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.testing import SPARSE_TABLES

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


def on_workers(folder: str) -> dict:
    """Every model of `SHAPES` predicts (numpy, tf.data,
    `predict_on_batch`); a `fit` logs to TensorBoard in `folder`."""
    # Tables partitioned: reads of them are the collectives under test.
    with kh.HybridStrategy(
        timeout_seconds=30, variable_kinds=SPARSE_TABLES
    ) as strategy:
        return predict(strategy, folder)


def build(strategy, shape="single"):
    with strategy.scope():
        model = build_model(shape)
        model.compile(
            optimizer="sgd",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def predict(strategy, folder: str) -> dict:
    out = {"pid": os.getpid(), "partitioned": []}
    for shape in SHAPES:
        model = build(strategy, shape)
        out[shape] = predictions(model)
        out[f"{shape}_weights"] = model.get_weights()
        table = model.get_layer("table").embeddings
        out["partitioned"].append(isinstance(table.value, ShardedTable))
    model = build(strategy)
    ids = make_ids()
    labels = ids[:, 0] % 3
    log_dir = os.path.join(folder, "logs")
    model.fit(
        ids,
        labels,
        batch_size=BATCH,
        epochs=2,
        verbose=0,
        callbacks=[keras.callbacks.TensorBoard(log_dir)],
    )
    out["deprecated"] = strategy.gather_predictions(out["single"]["numpy"], 16)
    return out
