"""A DLRM-style click model, trained with `fit`.

Dense features go through a bottom MLP; each categorical feature has its
own embedding table (partitioned over the workers); the pairwise dot
products of all these vectors and the bottom MLP's output feed a top MLP
that predicts a click. Lines marked `# keras_hybrid:` are all that
distribution adds.
"""

import dataclasses

import keras
import numpy as np
from absl import logging
from keras import ops

import keras_hybrid  # keras_hybrid:

# Run as a script (`python examples/recommender/main.py`, or from a copy of this
# folder) its siblings are top-level modules; as `examples.recommender.train`,
# modules of the package.
if __package__:
    from . import training
else:
    import training


class DotInteraction(keras.layers.Layer):
    """Dot products of every pair of feature vectors (upper triangle)."""

    def call(self, vectors):
        stacked = ops.stack(vectors, axis=1)  # [batch, features, dim]
        dots = ops.matmul(stacked, ops.transpose(stacked, (0, 2, 1)))
        rows, cols = np.triu_indices(len(vectors), k=1)
        flat = ops.reshape(dots, (-1, len(vectors) ** 2))
        return ops.take(flat, rows * len(vectors) + cols, axis=1)


def _mlp(sizes, name):
    return keras.Sequential(
        [keras.layers.Dense(s, activation="relu") for s in sizes], name=name
    )


def build_model(num_dense: int, vocab_sizes: list[int], dim: int):
    """Dense features and one id per table in, a click logit out."""
    dense = keras.Input((num_dense,), name="dense")
    ids = keras.Input((len(vocab_sizes),), dtype="int32", name="ids")
    vectors = [_mlp([64, dim], "bottom_mlp")(dense)]
    for t, vocab in enumerate(vocab_sizes):
        table = keras.layers.Embedding(vocab, dim, name=f"table_{t}")
        vectors.append(table(ids[:, t]))
    features = keras.layers.Concatenate()(
        [vectors[0], DotInteraction(name="interaction")(vectors)]
    )
    hidden = _mlp([64, 32], "top_mlp")(features)
    logit = keras.layers.Dense(1, name="logit")(hidden)
    return keras.Model({"dense": dense, "ids": ids}, logit)


def synthetic_clicks(num: int, num_dense: int, vocab_sizes, seed: int):
    """Zipf-distributed ids per table, normal dense features, and clicks
    drawn from a logistic model of both (each id has its own effect)."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(num, num_dense)).astype("float32")
    ids = np.stack(
        [training.zipf_ids(rng, v, num) for v in vocab_sizes], axis=1
    )
    logit = dense @ rng.normal(size=num_dense) / np.sqrt(num_dense)
    for t, vocab in enumerate(vocab_sizes):
        logit += rng.normal(size=vocab)[ids[:, t]]
    clicks = rng.random(num) < 1 / (1 + np.exp(-logit))
    inputs = {"dense": dense, "ids": ids.astype("int32")}
    return inputs, clicks.astype("float32")[:, None]


def read_clicks(path: str, num_dense: int, vocab_sizes):
    """A CSV file of `label,dense_1..dense_D,id_1..id_T` rows (no header).

    Ids are taken modulo their table's size (the hashing trick).
    """
    rows = np.loadtxt(path, delimiter=",", ndmin=2)
    expected = 1 + num_dense + len(vocab_sizes)
    if rows.shape[1] != expected:
        raise ValueError(
            f"Each row of --data must have 1 + {num_dense} + "
            f"{len(vocab_sizes)} = {expected} columns (label, dense "
            f"features, ids). Received: {rows.shape[1]} in {path}."
        )
    ids = rows[:, 1 + num_dense :].astype(np.int64) % np.asarray(vocab_sizes)
    inputs = {
        "dense": rows[:, 1 : 1 + num_dense].astype("float32"),
        "ids": ids.astype("int32"),
    }
    return inputs, rows[:, :1].astype("float32")


@dataclasses.dataclass(frozen=True)
class Config(training.CommonConfig):
    """Everything `train` takes: `main.py` builds it from its flags."""

    num_dense: int = 13
    vocab_sizes: tuple[int, ...] = (100_000, 20_000, 5_000, 500)
    dim: int = 16
    learning_rate: float = 0.005


def train(config: Config) -> dict:
    """Trains the click model.

    Returns:
        Dict with `loss`, `auc`, `val_loss` and `val_auc` per epoch (the
        held-out last 10% of the rows), `workers` and `chief` (whether this
        process is rank 0).
    """
    steps, batch_size, epochs = config.steps, config.batch_size, config.epochs
    data, num_dense = config.data, config.num_dense
    vocab_sizes, dim = config.vocab_sizes, config.dim
    learning_rate, seed = config.learning_rate, config.seed
    model_dir, log_dir = config.model_dir, config.log_dir
    step_log = config.step_log
    keras.utils.set_random_seed(seed)
    strategy = keras_hybrid.HybridStrategy()  # keras_hybrid:
    if data:
        x, y = read_clicks(data, num_dense, vocab_sizes)
    else:
        num = int(steps * batch_size / 0.9) + 1
        x, y = synthetic_clicks(num, num_dense, vocab_sizes, seed)
    split = int(0.9 * len(y))
    if steps:
        split = min(split, steps * batch_size)
    head = {k: v[:split] for k, v in x.items()}
    tail = {k: v[split:] for k, v in x.items()}
    with strategy.scope():  # keras_hybrid:
        model = build_model(num_dense, list(vocab_sizes), dim)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.BinaryCrossentropy(from_logits=True),
            metrics=[keras.metrics.AUC(from_logits=True, name="auc")],
        )
    writes = strategy.is_chief  # keras_hybrid: rank 0 writes the logs
    history = model.fit(
        head,
        y[:split],
        batch_size=batch_size,
        epochs=epochs,
        validation_data=(tail, y[split:]),
        callbacks=training.callbacks(model_dir, log_dir, step_log, writes),
    ).history
    if strategy.is_chief:  # keras_hybrid: one rank reports
        # Placement is final once a step was traced: kind, reason, bytes.
        logging.info("Routing plan:\n%s", strategy.plan)
    out = {
        k: history.get(k, []) for k in ("loss", "auc", "val_loss", "val_auc")
    }
    out.update(workers=strategy.size, chief=strategy.is_chief)  # keras_hybrid:
    return out
