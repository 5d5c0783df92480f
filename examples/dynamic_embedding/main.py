"""Step time of DynamicEmbedding next to a static Embedding, one process.

Keys are Zipf-distributed ranks, each mapped to a random 64-bit key (so
keys come from the whole int64 range). The dynamic model looks the keys
up in a table of `--capacity` rows with admission and eviction; the
static model reads an `Embedding` of the same `--capacity` rows by
`rank % capacity`. Both have the same head and optimizer, and are timed
on the same batches (after `--warmup_steps` steps).

    python examples/dynamic_embedding/main.py --steps=200

Logs, per model, ms per step and lookups per second, their ratio, and
the dynamic table's stats.
"""

import time

import keras
import numpy as np
from absl import app
from absl import flags
from absl import logging

from keras_hybrid.layers import DynamicEmbedding

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 200, "Timed training steps per model.")
flags.DEFINE_integer("warmup_steps", 20, "Untimed steps first.")
flags.DEFINE_integer("batch_size", 256, "Samples per step.")
flags.DEFINE_integer("seq_len", 16, "Keys per sample.")
flags.DEFINE_integer("dim", 32, "Row width.")
flags.DEFINE_integer("capacity", 100_000, "Rows of each table.")
flags.DEFINE_float("zipf", 1.1, "Zipf exponent of the key ranks.")
flags.DEFINE_integer("admit_after", 2, "Steps that see a key before a row.")
flags.DEFINE_string("eviction", "lfu", "Eviction policy of the dynamic table.")
flags.DEFINE_integer("seed", 0, "Seed of the data.")


class _StepTimes(keras.callbacks.Callback):
    def __init__(self, warmup: int):
        super().__init__()
        self.warmup, self.times, self._start = warmup, [], 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.warmup:
            self.times.append(time.perf_counter() - self._start)


def make_keys(steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`(keys, ranks)`, `[steps * batch, seq_len]` each."""
    rng = np.random.default_rng(seed)
    shape = (steps * FLAGS.batch_size, FLAGS.seq_len)
    ranks = rng.zipf(FLAGS.zipf, size=shape).astype(np.uint64)
    # splitmix64 of the rank: a random-looking key from the whole range.
    z = ranks * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))).view(np.int64), ranks


def build(embedding: keras.layers.Layer, dtype: str) -> keras.Model:
    keys = keras.Input(shape=(FLAGS.seq_len,), dtype=dtype)
    x = keras.ops.mean(embedding(keys), axis=1)
    x = keras.layers.Dense(64, activation="relu")(x)
    model = keras.Model(keys, keras.layers.Dense(1)(x))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


def time_fit(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    """Median seconds per timed step."""
    timer = _StepTimes(FLAGS.warmup_steps)
    model.fit(
        x,
        y,
        batch_size=FLAGS.batch_size,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[timer],
    )
    return float(np.median(timer.times))


def main(argv) -> None:
    del argv
    steps = FLAGS.steps + FLAGS.warmup_steps
    keys, ranks = make_keys(steps, FLAGS.seed)
    y = np.random.default_rng(1).normal(size=(len(keys), 1)).astype("float32")
    dynamic = DynamicEmbedding(
        FLAGS.dim,
        capacity=FLAGS.capacity,
        admit_after=FLAGS.admit_after,
        eviction=FLAGS.eviction,
    )
    static = keras.layers.Embedding(FLAGS.capacity, FLAGS.dim)
    rows = (ranks % np.uint64(FLAGS.capacity)).astype(np.int64)
    t_static = time_fit(build(static, "int64"), rows, y)
    t_dynamic = time_fit(build(dynamic, "int64"), keys, y)
    lookups = FLAGS.batch_size * FLAGS.seq_len
    logging.info(
        "distinct keys: %d, steps timed: %d", len(np.unique(keys)), FLAGS.steps
    )
    for name, t in (("static", t_static), ("dynamic", t_dynamic)):
        logging.info(
            "%-8s %8.2f ms/step %12.0f lookups/s", name, t * 1e3, lookups / t
        )
    logging.info("dynamic / static step time: %.2f", t_dynamic / t_static)
    logging.info("dynamic table: %s", dynamic.stats())


if __name__ == "__main__":
    app.run(main)
