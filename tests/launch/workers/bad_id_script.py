"""A plain training script (no absl.app) whose last worker looks up an id
outside its table; `sys.argv[1]` is `sparse` or `dense`, the table's kind.
"""

import sys

import keras
import numpy as np

import keras_hybrid

ROWS, BATCH = 1000, 12
strategy = keras_hybrid.HybridStrategy(
    variable_kinds={"item/embeddings": sys.argv[1]}, timeout_seconds=60
)
rng = np.random.default_rng(0)
x = rng.integers(0, ROWS, (2 * BATCH, 3)).astype("int32")
# The second global batch's last rows are the last worker's slice.
x[2 * BATCH - 1, 1] = ROWS + 5
y = rng.normal(size=(2 * BATCH, 1)).astype("float32")
with strategy.scope():
    ids = keras.Input((3,), dtype="int32")
    rows = keras.layers.Embedding(ROWS, 4, name="item")(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(rows)
    model = keras.Model(ids, keras.layers.Dense(1)(pooled))
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
