"""Dense-gradient fusion, side by side in one run.

    keras-hybrid-run -np 2 python examples/fusion_benchmark/main.py

Trains the same MLP twice in one job: gradients fused into buckets of
`--bucket_bytes`, then one all-reduce per tensor (`bucket_bytes=1`). Rank 0
prints step time, collectives and bytes per step for each, and the ratio.
"""

import time

import keras
import numpy as np
from absl import app
from absl import flags
from absl import logging

import keras_hybrid

FLAGS = flags.FLAGS
flags.DEFINE_integer("layers", 6, "Hidden Dense layers.")
flags.DEFINE_integer("width", 256, "Units per hidden layer.")
flags.DEFINE_integer("batch_size", 64, "Global batch size.")
flags.DEFINE_integer("steps", 120, "Measured steps per configuration.")
flags.DEFINE_integer("bucket_bytes", 4 * 2**20, "Fused bucket size.")


def measure(bucket_bytes: int) -> dict:
    """Warm-up epoch, then `--steps` timed steps; returns per-step figures."""
    keras.backend.clear_session()
    strategy = keras_hybrid.HybridStrategy(bucket_bytes=bucket_bytes)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(FLAGS.batch_size * 60, FLAGS.width))
    x = x.astype("float32")
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((FLAGS.width,))]
            + [
                keras.layers.Dense(FLAGS.width, activation="relu")
                for _ in range(FLAGS.layers)
            ]
            + [keras.layers.Dense(1)]
        )
        model.compile(optimizer="sgd", loss="mse")
    y = x[:, :1]
    model.fit(x, y, batch_size=FLAGS.batch_size, epochs=1, verbose=0)
    data = np.resize(x, (FLAGS.batch_size * FLAGS.steps, FLAGS.width))
    before = strategy.communicator.stats.snapshot()
    start = time.perf_counter()
    model.fit(data, data[:, :1], batch_size=FLAGS.batch_size, verbose=0)
    seconds = time.perf_counter() - start
    dense = strategy.communicator.stats.delta(before)["dense"]
    return {
        "ms_per_step": 1e3 * seconds / FLAGS.steps,
        "collectives_per_step": dense["calls"] / FLAGS.steps,
        "mb_per_step": dense["bytes"] / FLAGS.steps / 1e6,
        "is_chief": strategy.is_chief,
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    fused = measure(FLAGS.bucket_bytes)
    unfused = measure(1)
    if not fused["is_chief"]:
        return
    for name, r in (("fused", fused), ("one per tensor", unfused)):
        logging.info(
            "%-14s %7.2f ms/step  %4.1f collectives/step  %.3f MB/step",
            name,
            r["ms_per_step"],
            r["collectives_per_step"],
            r["mb_per_step"],
        )
    logging.info(
        "fused/unfused step time: %.2f",
        fused["ms_per_step"] / unfused["ms_per_step"],
    )


if __name__ == "__main__":
    app.run(main)
