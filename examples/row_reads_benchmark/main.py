"""Whole-table reads against row reads of a replicated table, side by side.

    python examples/row_reads_benchmark/main.py

Keras' `ops.take` reads an `Embedding`'s table whole and gathers from the
copy; after the optimizer's first sparse update TensorFlow copies the
whole table on every such read (copy-on-read). `keras_hybrid` gives a
table it keeps dense and only gathers a row read instead
(`keras_hybrid/sparse/replicated_gathers.py`). This trains the same
one-table model in one process both ways, in alternating rounds, and
prints the median milliseconds per step of each, their ratio, and how
far the final weights differ (they should not: the same rows and
gradients).
"""

import time

import keras
import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

from keras_hybrid.sparse import replicated_gathers

FLAGS = flags.FLAGS
flags.DEFINE_integer("vocab", 100_000, "Rows of the table.", lower_bound=1)
flags.DEFINE_integer("dim", 64, "Width of the table.", lower_bound=1)
flags.DEFINE_integer("batch_size", 64, "Sequences per step.", lower_bound=1)
flags.DEFINE_integer("seq_len", 32, "Ids per sequence.", lower_bound=1)
flags.DEFINE_integer("steps", 100, "Timed steps per round.", lower_bound=1)
flags.DEFINE_integer("rounds", 6, "Timed rounds per way.", lower_bound=1)


def build(rows: bool) -> keras.Model:
    keras.utils.set_random_seed(1)
    ids = keras.Input((FLAGS.seq_len,), dtype="int32")
    table = keras.layers.Embedding(FLAGS.vocab, FLAGS.dim, name="table")
    x = keras.layers.GlobalAveragePooling1D()(table(ids))
    x = keras.layers.Dense(64, activation="relu")(x)
    model = keras.Model(ids, keras.layers.Dense(8)(x))
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    if rows:
        replicated_gathers.install(table.embeddings)
    return model


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    rng = np.random.default_rng(0)
    p = 1.0 / np.arange(1, FLAGS.vocab + 1) ** 1.1
    n = FLAGS.batch_size * FLAGS.steps
    x = rng.choice(FLAGS.vocab, (n, FLAGS.seq_len), p=p / p.sum())
    x, y = x.astype(np.int32), rng.integers(0, 8, n).astype(np.int32)
    models = {"whole": build(False), "rows": build(True)}
    fit = dict(batch_size=FLAGS.batch_size, shuffle=False, verbose=0)
    for model in models.values():  # trace and first sparse update
        model.fit(x[: 2 * FLAGS.batch_size], y[: 2 * FLAGS.batch_size], **fit)
    times = {name: [] for name in models}
    for r in range(FLAGS.rounds):
        order = list(models) if r % 2 == 0 else list(models)[::-1]
        for name in order:
            start = time.perf_counter()
            models[name].fit(x, y, **fit)
            times[name].append(
                1e3 * (time.perf_counter() - start) / FLAGS.steps
            )
    ms = {name: float(np.median(t)) for name, t in times.items()}
    diff = max(
        float(np.abs(a - b).max())
        for a, b in zip(
            models["whole"].get_weights(),
            models["rows"].get_weights(),
            strict=True,
        )
    )
    print(
        f"table {FLAGS.vocab} x {FLAGS.dim}, TF {tf.__version__}: "
        f"whole reads {ms['whole']:.2f} ms/step, row reads "
        f"{ms['rows']:.2f} ms/step, ratio {ms['rows'] / ms['whole']:.2f}; "
        f"weights differ by at most {diff:.1e}"
    )
    for name, t in times.items():
        print(f"  {name} rounds: " + ", ".join(f"{v:.2f}" for v in t))


if __name__ == "__main__":
    app.run(main)
