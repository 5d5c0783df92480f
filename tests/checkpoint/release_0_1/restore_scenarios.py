"""Pool scenario: restores a release's sharded checkpoint under
`HybridStrategy` and returns the weights and optimizer state it then
holds."""

import os
import sys

import keras
import numpy as np

import keras_hybrid as kh

sys.path.insert(0, os.path.dirname(__file__))
import make_checkpoints as release  # noqa: E402


def restore(checkpoint: str) -> dict:
    """This rank's weights, optimizer slots and table rows after restoring
    `checkpoint`."""
    with kh.HybridStrategy(
        variable_kinds={"table/embeddings": "sparse"}
    ) as strategy:
        with strategy.scope():
            model = release.build_model()
            model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
            model.optimizer.build(model.trainable_variables)
        strategy.restore_checkpoint(model, checkpoint)
        table = model.get_layer("table").embeddings
        return {
            "weights": model.get_weights(),
            "slots": [np.asarray(v.numpy()) for v in model.optimizer.variables],
            "table_rows": int(table.value.shape[0]),
        }
