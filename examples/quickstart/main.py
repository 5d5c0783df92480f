"""Quickstart: unchanged Keras training on N processes.

    keras-hybrid-run -np 2 python examples/quickstart/main.py --epochs=5

Lines marked `# keras_hybrid:` are all that distribution adds.
"""

import keras
import numpy as np
from absl import app
from absl import flags
from absl import logging

import keras_hybrid  # keras_hybrid:

FLAGS = flags.FLAGS
flags.DEFINE_integer("epochs", 5, "Number of epochs.")
flags.DEFINE_integer("batch_size", 256, "Global batch size (all workers).")
flags.DEFINE_integer("num_samples", 8192, "Synthetic training samples.")
flags.DEFINE_float("learning_rate", 0.01, "Adam learning rate.")


def make_data(num_samples: int, seed: int = 0):
    """A noisy non-linear regression task, the same on every worker."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_samples, 16)).astype("float32")
    w = rng.normal(size=(16, 1)).astype("float32")
    y = np.tanh(x @ w) + 0.05 * rng.normal(size=(num_samples, 1))
    return x, y.astype("float32")


def build_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )


def train(epochs: int, batch_size: int, num_samples: int, lr: float):
    strategy = keras_hybrid.HybridStrategy()  # keras_hybrid:
    x, y = make_data(num_samples)
    with strategy.scope():  # keras_hybrid:
        model = build_model()
        model.compile(
            optimizer=keras.optimizers.Adam(lr), loss="mse", metrics=["mae"]
        )
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs)
    if strategy.is_chief:  # keras_hybrid: one rank reports
        logging.info(
            "%d worker(s); global loss per epoch: %s",
            strategy.size,
            ", ".join(f"{v:.4f}" for v in history.history["loss"]),
        )
    return history


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    train(
        FLAGS.epochs, FLAGS.batch_size, FLAGS.num_samples, FLAGS.learning_rate
    )


if __name__ == "__main__":
    app.run(main)
