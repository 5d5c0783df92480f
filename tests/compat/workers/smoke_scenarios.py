"""Pool scenario of the version-matrix smoke test: fit, predict, save.

Run on the pool of 2 workers by `test_smoke_multiprocess.py`. The item
table is forced sparse with `variable_kinds`, so it is partitioned
whatever the placement rules decide. Every rank returns its predictions on
a probe batch and how many table rows it holds; all ranks call
`model.save` (the chief writes the file).
"""

import os

import keras
import numpy as np
import tensorflow as tf
from smoke_data import BATCH  # noqa: I001  (beside this module)
from smoke_data import ROWS
from smoke_data import make_data

import keras_hybrid as kh

TABLE = "items/embeddings"


def build_model() -> keras.Model:
    ids = keras.Input(shape=(3,), dtype="int32", name="ids")
    rows = keras.layers.Embedding(ROWS, 4, name="items")(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(rows)
    out = keras.layers.Dense(1, name="head")(pooled)
    return keras.Model(ids, out)


def fit_predict_save(model_path: str) -> dict:
    """Trains, predicts and saves the model to `model_path`."""
    with kh.HybridStrategy(variable_kinds={TABLE: "sparse"}) as strategy:
        return _fit_predict_save(strategy, model_path)


def _fit_predict_save(strategy, model_path: str) -> dict:
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    x, y = make_data(BATCH * 4, seed=1)
    history = model.fit(
        x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0
    )
    probe, _ = make_data(BATCH, seed=2)
    # `predict` returns this rank's rows; put the global batch together.
    predictions = strategy.gather_predictions(
        model.predict(probe, batch_size=BATCH, verbose=0), BATCH
    )
    model.save(model_path)
    table = model.get_layer("items").embeddings.value
    return {
        "tf_version": tf.__version__,
        "keras_version": keras.__version__,
        "losses": history.history["loss"],
        "predictions": np.asarray(predictions),
        "local_table_rows": int(table.shape[0]),
        "table_type": type(table).__name__,
        "file_exists": os.path.exists(model_path),
    }
