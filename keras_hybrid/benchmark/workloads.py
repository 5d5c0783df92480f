"""The benchmark's workloads: a model and its data, from a few sizes.

`build(name, config, num_workers)` returns a compiled `(model, dataset)`;
call it inside `strategy.scope()`. Every call with the same arguments
gives the same data, on every worker and in every mode, so modes compare
on identical batches.

- `lm`: LM1B-shaped language model. A big input `Embedding`, a GRU, and a
  sampled softmax whose output weights are a second `Embedding` of the
  vocabulary, looked up for the true next token and `num_sampled`
  negatives per sequence (drawn from the token law; the log-Q correction
  of a real sampled softmax is left out, which changes the loss, not the
  traffic).
- `recommender`: DLRM-shaped. One `Embedding` per categorical feature with
  mixed table sizes, a bottom MLP over dense features, and a top MLP over
  their concatenation; a click label.
- `dense`: an MLP classifier with no embedding at all.

Ids follow a Zipf law truncated to the table, like words and item ids.

Example:

```python
config = workloads.WorkloadConfig(vocab=10_000, steps=20)
with strategy.scope():
    model, dataset = workloads.build("lm", config, strategy.size)
model.fit(dataset, epochs=1)
```
"""

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.benchmark.workload_config import WORKLOADS  # noqa: F401
from keras_hybrid.benchmark.workload_config import WorkloadConfig

DENSE_FEATURES = 13  # DLRM's Criteo layout: 13 dense, 26 categorical.


def build(name: str, config: WorkloadConfig, num_workers: int) -> tuple:
    """A compiled model and a dataset of `config.steps` global batches.

    Args:
        name: String. One of `WORKLOADS`.
        config: `WorkloadConfig`.
        num_workers: Int. Workers; the global batch is
            `config.batch_per_worker * num_workers`.

    Returns:
        `(model, dataset)`: a compiled `keras.Model` and a
        `tf.data.Dataset` of `(x, y)` global batches.

    Raises:
        ValueError: If `name` is unknown or `num_workers` < 1.
    """
    _check_name(name)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise TypeError(
            f"`num_workers` must be an int. Received: {num_workers!r}"
        )
    if num_workers < 1:
        raise ValueError(
            f"`num_workers` must be >= 1. Received: num_workers={num_workers}"
        )
    global_batch = config.batch_per_worker * num_workers
    x, y = make_arrays(name, config, config.steps * global_batch)
    model = _BUILDERS[name](config)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    return model, dataset


def make_arrays(name: str, config: WorkloadConfig, num_examples: int):
    """The workload's inputs `x` (a dict of arrays) and labels `y`."""
    _check_name(name)
    rng = np.random.default_rng(config.seed)
    if name == "lm":
        tokens = zipf_ids(
            rng, config.vocab, (num_examples, config.seq_len + 1), config
        )
        x = {
            "tokens": tokens[:, :-1],
            "targets": tokens[:, 1:],
            "negatives": zipf_ids(
                rng, config.vocab, (num_examples, config.num_sampled), config
            ),
        }
        # Column 0 of the sampled logits is the true class.
        return x, np.zeros((num_examples, config.seq_len), np.int32)
    if name == "recommender":
        x = {"dense_features": rng.normal(size=(num_examples, DENSE_FEATURES))}
        for i, rows in enumerate(config.table_rows):
            x[f"cat_{i}"] = zipf_ids(rng, rows, (num_examples,), config)
        x["dense_features"] = x["dense_features"].astype(np.float32)
        return x, rng.integers(0, 2, (num_examples, 1)).astype(np.float32)
    features = rng.normal(size=(num_examples, config.hidden))
    labels = rng.integers(0, 10, num_examples).astype(np.int32)
    return {"features": features.astype(np.float32)}, labels


def table_features(name: str, config: WorkloadConfig) -> dict:
    """Which inputs each embedding table is looked up with.

    Returns:
        Dict of the table's `Embedding` layer name to
        `(rows, dim, [input names])`; empty for `dense`.
    """
    _check_name(name)
    if name == "lm":
        return {
            "input_embedding": (config.vocab, config.dim, ["tokens"]),
            "softmax_weights": (
                config.vocab,
                config.hidden,
                ["targets", "negatives"],
            ),
        }
    if name == "recommender":
        return {
            f"table_{i}": (rows, config.dim, [f"cat_{i}"])
            for i, rows in enumerate(config.table_rows)
        }
    return {}


def zipf_ids(rng, rows: int, shape, config: WorkloadConfig) -> np.ndarray:
    """Int64 ids in `[0, rows)` with p(k) ~ 1 / (k + 1)**zipf."""
    p = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** config.zipf
    return rng.choice(rows, size=shape, p=p / p.sum()).astype(np.int64)


class SampledLogits(keras.layers.Layer):
    """Logits of the true class (column 0) and the sampled negatives."""

    def call(self, hidden, true_weights, negative_weights):
        true = keras.ops.sum(hidden * true_weights, axis=-1, keepdims=True)
        negative = keras.ops.einsum("btd,bsd->bts", hidden, negative_weights)
        return keras.ops.concatenate([true, negative], axis=-1)


def _lm(config: WorkloadConfig) -> keras.Model:
    tokens = keras.Input((config.seq_len,), dtype="int64", name="tokens")
    targets = keras.Input((config.seq_len,), dtype="int64", name="targets")
    negatives = keras.Input(
        (config.num_sampled,), dtype="int64", name="negatives"
    )
    embedded = keras.layers.Embedding(
        config.vocab, config.dim, name="input_embedding"
    )(tokens)
    hidden = keras.layers.GRU(config.hidden, return_sequences=True)(embedded)
    softmax = keras.layers.Embedding(
        config.vocab, config.hidden, name="softmax_weights"
    )
    logits = SampledLogits(name="sampled_logits")(
        hidden, softmax(targets), softmax(negatives)
    )
    model = keras.Model([tokens, targets, negatives], logits, name="lm")
    model.compile(
        optimizer=keras.optimizers.Adagrad(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _recommender(config: WorkloadConfig) -> keras.Model:
    dense_in = keras.Input((DENSE_FEATURES,), name="dense_features")
    bottom = _mlp(dense_in, [config.hidden, config.dim], "bottom")
    inputs, parts = [dense_in], [bottom]
    for i, rows in enumerate(config.table_rows):
        ids = keras.Input((), dtype="int64", name=f"cat_{i}")
        inputs.append(ids)
        parts.append(
            keras.layers.Embedding(rows, config.dim, name=f"table_{i}")(ids)
        )
    joined = keras.layers.Concatenate()(parts)
    top = _mlp(joined, [config.hidden, config.hidden // 2], "top")
    click = keras.layers.Dense(1, name="click")(top)
    model = keras.Model(inputs, click, name="recommender")
    model.compile(
        optimizer=keras.optimizers.Adagrad(0.05),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def _dense(config: WorkloadConfig) -> keras.Model:
    features = keras.Input((config.hidden,), name="features")
    hidden = _mlp(features, [config.hidden * 4] * config.dense_layers, "mlp")
    logits = keras.layers.Dense(10, name="logits")(hidden)
    model = keras.Model({"features": features}, logits, name="dense")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _mlp(x, widths, name):
    for i, width in enumerate(widths):
        x = keras.layers.Dense(width, activation="relu", name=f"{name}_{i}")(x)
    return x


def _check_name(name: str) -> None:
    if name not in WORKLOADS:
        raise ValueError(
            f"`workload` must be one of {WORKLOADS}. Received: {name!r}"
        )


_BUILDERS = {"lm": _lm, "recommender": _recommender, "dense": _dense}
