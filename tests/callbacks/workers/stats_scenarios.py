"""Pool scenario: trains a tiny model with a partitioned table under
`CommunicationStats`, `CSVLogger` and a recorder; returns what they saw."""

import os

import keras
import numpy as np
import stats_data as data  # noqa: I001  (sits beside this module)

import keras_hybrid as kh
from keras_hybrid.callbacks import CommunicationStats
from keras_hybrid.testing import SPARSE_TABLES


class Recorder(keras.callbacks.Callback):
    """Keeps the `comm_*` entries of batch logs, as later callbacks see."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def on_train_batch_end(self, batch, logs=None):
        comm = {k: float(v) for k, v in logs.items() if k.startswith("comm")}
        self.batches.append((batch, comm))


def train(folder: str) -> dict:
    """Trains with the CSV log in `folder`."""
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds=SPARSE_TABLES
    ) as strategy:
        return _train(strategy, folder)


def _train(strategy, folder: str) -> dict:
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((data.IDS_PER_SAMPLE,), dtype="int64"),
                keras.layers.Embedding(data.ROWS, data.DIM, name="table"),
                keras.layers.Flatten(),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x, y = data.make_data()
    # One path for every rank, as a user writes it: rank 0 writes the file.
    csv_path = os.path.join(folder, "log.csv")
    stats = CommunicationStats(every_n_steps=data.EVERY)
    recorder = Recorder()
    history = model.fit(
        x,
        y,
        batch_size=data.GLOBAL_BATCH,
        epochs=data.EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=[stats, keras.callbacks.CSVLogger(csv_path), recorder],
    )
    (table,) = strategy.plan.of_kind("sparse")
    csv_text = None
    if strategy.is_chief:
        with open(csv_path) as f:
            csv_text = f.read()
    return {
        "history": history.history,
        "batches": recorder.batches,
        "csv": csv_text,
        "owner": table.partition.shard_of(np.arange(data.ROWS)),
        "dense_bytes": sum(
            int(np.prod(v.shape)) * 4
            for v in model.trainable_variables
            if v.path != model.get_layer("table").embeddings.path
        ),
        "summary": stats.summary,
    }
