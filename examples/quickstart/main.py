"""Quickstart: unchanged Keras training on N processes.

A regression with an item-id feature: the item table (an Embedding) is
partitioned over the workers, the dense layers are replicated.

    keras-hybrid-run -np 2 examples/quickstart/main.py --epochs=5

Lines marked `# keras_hybrid:` are all that distribution adds.
"""

import dataclasses

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
flags.DEFINE_integer("num_items", 20000, "Rows of the item table.")
flags.DEFINE_integer("seed", 0, "Seed of the data and the initial weights.")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything `train` takes; `main` builds it from the flags (whose
    defaults are the only ones)."""

    epochs: int
    batch_size: int
    num_samples: int
    learning_rate: float
    num_items: int
    seed: int = 0


def make_data(num_samples: int, num_items: int, seed: int = 0):
    """A noisy regression on 16 features and a skewed item id, the same on
    every worker. Each item has its own offset, which the table learns."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_samples, 16)).astype("float32")
    items = (rng.zipf(1.2, size=(num_samples, 1)) - 1) % num_items
    w = rng.normal(size=(16, 1)).astype("float32")
    offset = rng.normal(size=(num_items, 1)).astype("float32")
    y = np.tanh(x @ w) + offset[items[:, 0]]
    y += 0.05 * rng.normal(size=(num_samples, 1))
    return (x, items.astype("int32")), y.astype("float32")


def build_model(num_items: int) -> keras.Model:
    features = keras.Input((16,), name="features")
    items = keras.Input((1,), dtype="int32", name="item")
    # The table is partitioned over the workers; only looked-up rows move.
    item_vectors = keras.layers.Flatten()(
        keras.layers.Embedding(num_items, 8, name="item_table")(items)
    )
    hidden = keras.layers.Concatenate()([features, item_vectors])
    hidden = keras.layers.Dense(64, activation="relu")(hidden)
    hidden = keras.layers.Dense(64, activation="relu")(hidden)
    return keras.Model([features, items], keras.layers.Dense(1)(hidden))


def train(config: Config):
    strategy = keras_hybrid.HybridStrategy()  # keras_hybrid:
    x, y = make_data(config.num_samples, config.num_items, config.seed)
    # Rank 0's initial weights go to every worker: seeding makes the
    # printed losses the same from run to run.
    keras.utils.set_random_seed(config.seed)
    with strategy.scope():  # keras_hybrid:
        model = build_model(config.num_items)
        model.compile(
            optimizer=keras.optimizers.Adam(config.learning_rate),
            loss="mse",
            metrics=["mae"],
        )
    history = model.fit(
        x, y, batch_size=config.batch_size, epochs=config.epochs
    )
    if strategy.is_chief:  # keras_hybrid: one rank reports
        # Placement is final once a step was traced: kind, reason, bytes.
        logging.info("Routing plan:\n%s", strategy.plan)
        logging.info(
            "%d worker(s); global loss per epoch: %s",
            strategy.size,
            ", ".join(f"{v:.4f}" for v in history.history["loss"]),
        )
        traffic = strategy.communicator.stats.snapshot()
        logging.info(
            "Bytes rank 0 sent: %s",
            ", ".join(f"{k} {v['bytes']}" for k, v in traffic.items()),
        )
    return history


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    train(
        Config(
            **{f.name: FLAGS[f.name].value for f in dataclasses.fields(Config)}
        )
    )


if __name__ == "__main__":
    app.run(main)
