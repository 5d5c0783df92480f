"""How many collectives each train step launches, per example model.

    keras-hybrid-run -np 2 python -m examples.collective_census.main
    keras-hybrid-run -np 2 python examples/collective_census/main.py \
        --models=recommender,batchnorm_mixed --out=census.json

Each model (the example models' own `build_model`, compiled as their
`train.py` compiles them, plus a model with `BatchNormalization` under
`mixed_float16` with a table) trains `--steps` steps. The counts are the
strategy's own (`communicator.stats`: each collective it issues, by
traffic path), taken between the end of the first step and the end of the
last, so the first step's one-off work (tracing, placement, initial
broadcasts) is not counted. Rank 0 prints a table of collectives per step
by path; `--out` writes it as JSON.
"""

import json
import os
import sys

import keras
import numpy as np
from absl import app
from absl import flags
from absl import logging

import keras_hybrid as kh
from keras_hybrid.comm.comm_stats import PATHS

if not __package__:
    # Run as a script (`python examples/collective_census/main.py`): the
    # example models are imported from the repository this file is in.
    sys.path.insert(
        0,
        os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        ),
    )
from examples.dense_cnn import train as dense_cnn  # noqa: E402
from examples.lm import train as lm  # noqa: E402
from examples.nmt import train as nmt  # noqa: E402
from examples.recommender import train as recommender  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 5, "Steps per model (the first not counted).", 2)
flags.DEFINE_integer("batch_size", 16, "Global batch size.", 1)
flags.DEFINE_list(
    "models",
    "dense_cnn,lm,nmt,recommender,quickstart,batchnorm_mixed",
    "Models to count.",
)
flags.DEFINE_string("out", "", "If set, rank 0 writes the table here.")


def _dense_cnn(n):
    x, y = dense_cnn.synthetic_images(n, 0)
    model = dense_cnn.build_model(dense_cnn.CLASSES)
    model.compile(
        optimizer=keras.optimizers.Adam(0.001),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model, x, y


def _lm(n):
    c = lm.Config(steps=1, batch_size=1, epochs=1)
    stream = lm.synthetic_stream(n * c.seq_len + 2 * c.seq_len, c.vocab, 0)
    x, y = lm.windows(stream, c.seq_len, n)
    model = lm.build_model(c.vocab, c.seq_len, c.dim, c.hidden, c.num_sampled)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=lm.token_loss)
    return model, x, y


def _nmt(n):
    c = nmt.Config(steps=1, batch_size=1, epochs=1)
    x, y = nmt.teacher_forcing(*nmt.synthetic_pairs(n, c.vocab, c.seq_len, 0))
    model = nmt.build_model(c.vocab, c.vocab, c.dim, c.hidden)
    model.compile(
        optimizer=keras.optimizers.Adam(0.005),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model, x, y


def _recommender(n):
    c = recommender.Config(steps=1, batch_size=1, epochs=1)
    x, y = recommender.synthetic_clicks(n, c.num_dense, c.vocab_sizes, 0)
    model = recommender.build_model(c.num_dense, list(c.vocab_sizes), c.dim)
    model.compile(
        optimizer=keras.optimizers.Adam(0.005),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.AUC(from_logits=True, name="auc")],
    )
    return model, x, y


def _quickstart(n):
    # examples/quickstart/main.py's model: features and an item id.
    rng = np.random.default_rng(0)
    x = [
        rng.normal(size=(n, 16)).astype("float32"),
        rng.integers(0, 10_000, size=(n, 1)),
    ]
    features = keras.Input((16,), name="features")
    items = keras.Input((1,), dtype="int32", name="item")
    table = keras.layers.Embedding(10_000, 8, name="item_table")(items)
    hidden = keras.layers.Concatenate()(
        [features, keras.layers.Flatten()(table)]
    )
    hidden = keras.layers.Dense(64, activation="relu")(hidden)
    hidden = keras.layers.Dense(64, activation="relu")(hidden)
    model = keras.Model([features, items], keras.layers.Dense(1)(hidden))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model, x, rng.normal(size=(n, 1)).astype("float32")


def _batchnorm_mixed(n):
    """A table, a convolution with BatchNormalization, mixed precision
    (Keras wraps the optimizer in a `LossScaleOptimizer`) and a metric."""
    rng = np.random.default_rng(0)
    x = [
        rng.normal(size=(n, 8, 8, 1)).astype("float32"),
        rng.integers(0, 20_000, size=(n, 4)),
    ]
    images = keras.Input((8, 8, 1), name="images")
    ids = keras.Input((4,), dtype="int32", name="ids")
    h = keras.layers.Conv2D(8, 3)(images)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Flatten()(keras.layers.ReLU()(h))
    rows = keras.layers.Embedding(20_000, 8, name="table")(ids)
    h = keras.layers.Concatenate()([h, keras.layers.Flatten()(rows)])
    out = keras.layers.Dense(1, dtype="float32")(h)
    model = keras.Model([images, ids], out)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model, x, rng.normal(size=(n, 1)).astype("float32")


MODELS = {
    "dense_cnn": _dense_cnn,
    "lm": _lm,
    "nmt": _nmt,
    "recommender": _recommender,
    "quickstart": _quickstart,
    "batchnorm_mixed": _batchnorm_mixed,
}


class _Window(keras.callbacks.Callback):
    """Snapshots the strategy's counters at the end of the first and the
    last step."""

    def __init__(self, stats, steps):
        super().__init__()
        self._stats, self._last = stats, steps - 1
        self.first = self.delta = None

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.first = self._stats.snapshot()
        elif batch == self._last:
            self.delta = self._stats.delta(self.first)


def count(name: str, steps: int, batch_size: int) -> dict:
    """Collectives per step of `name`, by path, on this worker."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    policy = "mixed_float16" if name == "batchnorm_mixed" else "float32"
    keras.mixed_precision.set_global_policy(policy)
    try:
        options = {"variable_kinds": lm.SOFTMAX_KINDS} if name == "lm" else {}
        with kh.HybridStrategy(**options) as strategy:
            with strategy.scope():
                model, x, y = MODELS[name](steps * batch_size)
            window = _Window(strategy.communicator.stats, steps)
            model.fit(
                x, y, batch_size=batch_size, verbose=0, callbacks=[window]
            )
            per_step = {
                path: window.delta[path]["calls"] / (steps - 1)
                for path in PATHS
            }
            return {
                "per_step": per_step,
                "total": sum(per_step.values()),
                "workers": strategy.size,
                "rank": strategy.rank,
            }
    finally:
        keras.mixed_precision.set_global_policy("float32")


def table(counts: dict) -> str:
    """The counts as a text table, a row per model."""
    paths = [p for p in PATHS if any(c["per_step"][p] for c in counts.values())]
    lines = [
        "model            " + "".join(f"{p:>12}" for p in paths) + "  total"
    ]
    for name, c in counts.items():
        cells = "".join(f"{c['per_step'][p]:>12g}" for p in paths)
        lines.append(f"{name:<17}{cells}  {c['total']:g}")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    unknown = sorted(set(FLAGS.models) - set(MODELS))
    if unknown:
        raise app.UsageError(
            f"Unknown --models {unknown}; known: {sorted(MODELS)}"
        )
    counts = {
        name: count(name, FLAGS.steps, FLAGS.batch_size)
        for name in FLAGS.models
    }
    first = next(iter(counts.values()))
    if first["rank"] == 0:
        logging.info(
            "Collectives per train step on %d workers:\n%s",
            first["workers"],
            table(counts),
        )
        if FLAGS.out:
            with open(FLAGS.out, "w") as f:
                json.dump(counts, f, indent=1)


if __name__ == "__main__":
    app.run(main)
