"""Step time of DynamicEmbedding next to a static Embedding, on 1 or more
workers.

Keys are Zipf-distributed ranks, each mapped to a random 64-bit key (so
keys come from the whole int64 range). The dynamic model looks the keys
up in a table of `--capacity` rows per worker with admission and
eviction; the static model reads an `Embedding` that holds as many rows
as the dynamic table on all workers together, `--capacity` times the
workers (partitioned over them by `HybridStrategy`'s plan, so each
worker holds `--capacity` rows of either table), by `rank % rows`. A
third model reads a static `Embedding` of only the rows the dynamic table
filled (its live rows, all workers together), which prices the dynamic
table's free rows: Keras optimizers update every row of a table each
step, live or not. All have the same head and optimizer, and are timed
on the same global batches (`--batch_size` per worker), after
`--warmup_steps` steps, in this one run.

    python examples/dynamic_embedding/main.py --steps=200
    keras-hybrid-run -np 2 python examples/dynamic_embedding/main.py
    keras-hybrid-run -np 2 python examples/dynamic_embedding/main.py \
        --string_keys   # each key spelled as a string, e.g. "user:<key>"
    python -m examples.dynamic_embedding.scaling   # 1, 2 and 4 workers

Logs, per model, ms per step, lookups per second per worker and resident
memory, the dynamic model's ratio to each static one, and the dynamic
table's stats; `--report` writes them as JSON (each rank its own,
`<report>.rank<r>` beyond rank 0).
"""

import json
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

import keras_hybrid as kh
from keras_hybrid.layers import DynamicEmbedding

# Run as a script its siblings are top-level modules; as
# `-m examples.dynamic_embedding.<name>`, modules of the package.
if __package__:
    from .resident import resident_mb
else:
    from resident import resident_mb

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 200, "Timed training steps per model.")
flags.DEFINE_integer("warmup_steps", 20, "Untimed steps first.")
flags.DEFINE_integer("batch_size", 256, "Samples per step and worker.")
flags.DEFINE_integer("seq_len", 16, "Keys per sample.")
flags.DEFINE_integer("dim", 32, "Row width.")
flags.DEFINE_integer("capacity", 100_000, "Rows of each table (per worker).")
flags.DEFINE_float("zipf", 1.1, "Zipf exponent of the key ranks.")
flags.DEFINE_integer("admit_after", 2, "Steps that see a key before a row.")
flags.DEFINE_string("eviction", "lfu", "Eviction policy of the dynamic table.")
flags.DEFINE_integer("seed", 0, "Seed of the data.")
flags.DEFINE_string("report", None, "Where to write the figures as JSON.")
flags.DEFINE_bool(
    "string_keys",
    False,
    "Feed the dynamic model string keys ('user:<key>') through tf.data "
    "instead of int64 keys.",
)


class _StepTimes(keras.callbacks.Callback):
    def __init__(self, warmup: int):
        super().__init__()
        self.warmup, self.times, self._start = warmup, [], 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.warmup:
            self.times.append(time.perf_counter() - self._start)


def make_keys(num_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`(keys, ranks)`, `[num_samples, seq_len]` each."""
    rng = np.random.default_rng(seed)
    shape = (num_samples, FLAGS.seq_len)
    ranks = rng.zipf(FLAGS.zipf, size=shape).astype(np.uint64)
    # splitmix64 of the rank: a random-looking key from the whole range.
    z = ranks * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))).view(np.int64), ranks


def build(strategy, embedding: keras.layers.Layer, key_dtype) -> keras.Model:
    with strategy.scope():
        keys = keras.Input(shape=(FLAGS.seq_len,), dtype=key_dtype)
        x = keras.ops.mean(embedding(keys), axis=1)
        x = keras.layers.Dense(64, activation="relu")(x)
        model = keras.Model(keys, keras.layers.Dense(1)(x))
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    return model


def time_fit(model: keras.Model, x, y, global_batch: int) -> float:
    """Median seconds per timed step."""
    timer = _StepTimes(FLAGS.warmup_steps)
    if x.dtype.kind == "S":
        # Keras' NumPy adapter takes no strings; a `tf.data` pipeline does.
        data = tf.data.Dataset.from_tensor_slices((x, y))
        fit = {"x": data.batch(global_batch)}
    else:
        fit = {"x": x, "y": y, "batch_size": global_batch, "shuffle": False}
    model.fit(**fit, epochs=1, verbose=0, callbacks=[timer])
    return float(np.median(timer.times))


def _timed(strategy, embedding, x, y, global_batch) -> dict:
    key_dtype = "string" if x.dtype.kind == "S" else "int64"
    model = build(strategy, embedding, key_dtype)
    seconds = time_fit(model, x, y, global_batch)
    return {
        "ms_per_step": seconds * 1e3,
        "lookups_per_second_per_worker": (
            FLAGS.batch_size * FLAGS.seq_len / seconds
        ),
        "resident_mb_after": resident_mb()[0],
    }


def main(argv) -> None:
    del argv
    with kh.HybridStrategy() as strategy:
        global_batch = FLAGS.batch_size * strategy.size
        samples = (FLAGS.steps + FLAGS.warmup_steps) * global_batch
        keys, ranks = make_keys(samples, FLAGS.seed)
        if FLAGS.string_keys:
            keys = np.char.add(b"user:", keys.astype("S20"))
        rng = np.random.default_rng(1)
        y = rng.normal(size=(len(keys), 1)).astype("float32")
        # The same rows per worker as the dynamic table: Keras optimizers
        # update a table's every row each step, so a static table of fewer
        # rows per worker would time a smaller update.
        static_rows = FLAGS.capacity * strategy.size
        rows = (ranks % np.uint64(static_rows)).astype(np.int64)
        dynamic = DynamicEmbedding(
            FLAGS.dim,
            capacity=FLAGS.capacity,
            admit_after=FLAGS.admit_after,
            eviction=FLAGS.eviction,
        )
        static = keras.layers.Embedding(static_rows, FLAGS.dim)
        report = {"workers": strategy.size, "rank": strategy.rank}
        report["baseline_mb"] = resident_mb()[0]
        report["static_rows"] = static_rows
        for name, embedding, x in (
            ("static", static, rows),
            ("dynamic", dynamic, keys),
        ):
            report[name] = _timed(strategy, embedding, x, y, global_batch)
        report["distinct_keys"] = int(len(np.unique(keys)))
        report["dynamic_stats"] = dynamic.stats()
        # A static table of only the rows the dynamic one filled: what the
        # dynamic table's free rows cost.
        live = max(report["dynamic_stats"]["rows"], strategy.size)
        report["static_live_rows"] = live
        report["static_live"] = _timed(
            strategy,
            keras.layers.Embedding(live, FLAGS.dim),
            (ranks % np.uint64(live)).astype(np.int64),
            y,
            global_batch,
        )
        report["ratio"] = (
            report["dynamic"]["ms_per_step"] / report["static"]["ms_per_step"]
        )
        report["ratio_live"] = (
            report["dynamic"]["ms_per_step"]
            / report["static_live"]["ms_per_step"]
        )
        report["plan"] = str(strategy.plan)
    for name in ("static", "dynamic", "static_live"):
        figures = report[name]
        logging.info(
            "%-11s %8.2f ms/step %12.0f lookups/s per worker %8.0f MB",
            name,
            figures["ms_per_step"],
            figures["lookups_per_second_per_worker"],
            figures["resident_mb_after"],
        )
    logging.info("dynamic / static step time: %.2f", report["ratio"])
    logging.info(
        "dynamic / static of the %d live rows: %.2f",
        report["static_live_rows"],
        report["ratio_live"],
    )
    logging.info("dynamic table: %s", report["dynamic_stats"])
    if FLAGS.report:
        path = FLAGS.report
        if report["rank"]:
            path = f"{path}.rank{report['rank']}"
        with open(path, "w") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    app.run(main)
