"""A plain training script (no absl.app.run): fits with Keras' default
progress bar and logs the routing plan with absl."""

import keras
import numpy as np
from absl import logging

import keras_hybrid

strategy = keras_hybrid.HybridStrategy(
    variable_kinds={".*embeddings": "sparse"}
)
rng = np.random.default_rng(0)
x = rng.integers(0, 100, (64, 2)).astype("int32")
y = rng.normal(size=(64, 1)).astype("float32")
with strategy.scope():
    ids = keras.Input((2,), dtype="int32")
    rows = keras.layers.Embedding(100, 4, name="item")(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(rows)
    model = keras.Model(ids, keras.layers.Dense(1)(pooled))
    model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=16, epochs=2)
if strategy.is_chief:
    logging.info("Routing plan:\n%s", strategy.plan)
