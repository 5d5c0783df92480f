"""Resident memory of a DynamicEmbedding while many distinct keys stream by.

Feeds `--distinct_keys` keys, each new (a hash of a counter, from the
whole int64 range), through a model with a `DynamicEmbedding` of
`--capacity` rows trained by Adam, one process under `HybridStrategy()`
(as each worker of a job; `--nostrategy` for plain Keras), and reports
resident memory (VmRSS and its peak VmHWM) against the bound

    baseline + 1.5 * capacity * (row + Adam's 2 slot rows)

where `baseline` is the resident memory before the model is built.
`--static` measures a static Embedding of the same rows instead, for the
fixed costs (graphs, Keras, the optimizer's whole-table temporaries).

    python examples/dynamic_embedding/memory.py --distinct_keys=10000000
    python examples/dynamic_embedding/memory.py --distinct_keys=200000 --static
"""

import keras
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from keras_hybrid import HybridStrategy
from keras_hybrid.dynamic import key_hash
from keras_hybrid.layers import DynamicEmbedding

# Run as a script its siblings are top-level modules; as
# `-m examples.dynamic_embedding.<name>`, modules of the package.
if __package__:
    from .resident import resident_mb
else:
    from resident import resident_mb

FLAGS = flags.FLAGS
flags.DEFINE_integer("distinct_keys", 10_000_000, "Keys fed, all new.")
flags.DEFINE_integer("capacity", 100_000, "Rows of the table.")
flags.DEFINE_integer("dim", 32, "Row width.")
flags.DEFINE_integer("batch_size", 256, "Samples per step.")
flags.DEFINE_integer("seq_len", 16, "Keys per sample.")
flags.DEFINE_integer("admit_after", 1, "Steps that see a key before a row.")
flags.DEFINE_string("eviction", "lfu", "Eviction policy.")
flags.DEFINE_bool(
    "strategy",
    True,
    "Train under a one-process HybridStrategy, as a worker of a job does "
    "(the optimizer then updates the rows in use, a chunk at a time); "
    "--nostrategy trains in plain Keras, where it updates every row.",
)
flags.DEFINE_bool(
    "static",
    False,
    "Measure a static Embedding of `capacity` rows instead, read by "
    "key % capacity (the baseline of the same rows and slots).",
)


def dataset(count: int) -> tf.data.Dataset:
    def key(i):
        bits = key_hash.mix(tf.bitcast(i, tf.uint64), 12345)
        return tf.bitcast(bits, tf.int64)

    keys = tf.data.Dataset.range(count).map(key).batch(FLAGS.seq_len)
    return keys.map(lambda k: (k, 0.0)).batch(FLAGS.batch_size).prefetch(2)


def main(argv) -> None:
    del argv
    if not FLAGS.strategy:
        measure()
        return
    with HybridStrategy() as strategy, strategy.scope():
        measure()


def measure() -> None:
    baseline, _ = resident_mb()
    keys = keras.Input(shape=(FLAGS.seq_len,), dtype="int64")
    if FLAGS.static:
        layer = keras.layers.Embedding(FLAGS.capacity, FLAGS.dim)
        rows = keras.ops.mod(keys, FLAGS.capacity)
    else:
        layer = DynamicEmbedding(
            FLAGS.dim,
            capacity=FLAGS.capacity,
            admit_after=FLAGS.admit_after,
            eviction=FLAGS.eviction,
        )
        rows = keys
    x = keras.ops.mean(layer(rows), axis=(1, 2))
    model = keras.Model(keys, x)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(dataset(FLAGS.distinct_keys), epochs=1, verbose=0)
    rss, peak = resident_mb()
    table_mb = FLAGS.capacity * FLAGS.dim * 4 * 3 / 2**20
    bound = baseline + 1.5 * table_mb
    logging.info(
        "keys fed: %d, baseline %.0f MB, table + slots %.1f MB, bound %.0f MB",
        FLAGS.distinct_keys,
        baseline,
        table_mb,
        bound,
    )
    logging.info("resident %.0f MB, peak %.0f MB", rss, peak)
    logging.info("within bound: %s", peak <= bound)
    if not FLAGS.static:
        logging.info("dynamic table: %s", layer.stats())


if __name__ == "__main__":
    app.run(main)
