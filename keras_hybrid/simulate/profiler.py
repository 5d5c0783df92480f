"""`profile_model`: measures a Keras model's `Profile` in one process.

A table is what the design calls one: a variable whose gradient is
`tf.IndexedSlices`. Its ids are read off that gradient (`indices` holds one
id per lookup, duplicates included), so any model works, whatever layer
looks the table up. A `DynamicEmbedding`'s table is counted by the keys
the layer looks up instead (`layers.key_watch`), admitted or not: its
exchange moves them all, and its gradient holds admitted keys only.
"""

import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats
from keras_hybrid.layers import key_watch


def profile_model(
    model,
    make_batch: Callable,
    batch_sizes=(32, 64, 128),
    batches: int = 4,
    timed_steps: int = 5,
    name: str = "model",
    call_inputs: dict | None = None,
    warmup_steps: int = 2,
) -> Profile:
    """Measures variable sizes, unique ids per batch and step times.

    The model trains for `warmup_steps + timed_steps` steps per batch
    size (`train_on_batch`), so its weights change.

    A table's gradient holds the ids of all its lookups together. If a
    table is looked up by several calls (each pulls and pushes its own
    unique ids), name their inputs in `call_inputs` to count per call.

    Args:
        model: A compiled `keras.Model`.
        make_batch: Callable `(batch_size, index) -> (x, y)` returning
            batch number `index` of `batch_size` samples.
        batch_sizes: Sequence of ints. Batch sizes to measure (at least
            two for a fit of the unique-id curve). Defaults to
            `(32, 64, 128)`.
        batches: Int. Batches averaged per batch size for the unique-id
            counts. Defaults to `4`.
        timed_steps: Int. Train steps timed per batch size (the median is
            kept, after 2 untimed steps). Defaults to `5`.
        name: String. Name written into the profile. Defaults to `"model"`.
        call_inputs: Optional dict `{variable path: [input names]}`: the
            inputs of `x` (a dict) each lookup call of the table reads.
            Tables not named are counted as one call, from the gradient.
        warmup_steps: Int. Untimed train steps before timing. Defaults
            to `2`.

    Returns:
        A `Profile`.

    Example:

    ```python
    profile = profile_model(model, lambda b, i: (x[:b], y[:b]), (16, 32))
    profile.of_kind("sparse")[0].unique_ids(64)
    ```

    Raises:
        ValueError: If `batch_sizes` is empty or has a size < 1, if
            `batches` or `timed_steps` is < 1, `warmup_steps` < 0, or if
            the model is not compiled.
    """
    batch_sizes = _check_args(model, batch_sizes, batches, timed_steps)
    if warmup_steps < 0:
        raise ValueError(
            f"`warmup_steps` must be >= 0. Received: {warmup_steps}"
        )
    ids, calls = {}, {}
    for b in batch_sizes:
        logging.info("Profiling unique ids at batch size %d", b)
        for i in range(batches):
            x, y = make_batch(b, i)
            for path, found in _lookups(model, x, y).items():
                ids.setdefault(path, []).append((b, *found))
            for path, names in (call_inputs or {}).items():
                calls.setdefault(path, []).append(_per_call(x, names, b))
    seconds = []
    for b in batch_sizes:
        seconds.append(
            _step_seconds(model, make_batch, b, warmup_steps, timed_steps)
        )
        logging.info("Batch size %d: %.2f ms per step", b, 1e3 * seconds[-1])
    return Profile(
        name=name,
        variables=tuple(
            _stats(v, ids.get(v.path), batch_sizes, calls.get(v.path))
            for v in model.trainable_variables
        ),
        batch_sizes=batch_sizes,
        compute_seconds=tuple(seconds),
    )


def _check_args(model, batch_sizes, batches, timed_steps) -> tuple:
    batch_sizes = tuple(batch_sizes)
    if not batch_sizes or any(
        isinstance(b, bool) or not isinstance(b, int) or b < 1
        for b in batch_sizes
    ):
        raise ValueError(
            "`batch_sizes` must be a non-empty sequence of ints >= 1. "
            f"Received: batch_sizes={batch_sizes!r}"
        )
    for arg, value in (("batches", batches), ("timed_steps", timed_steps)):
        if value < 1:
            raise ValueError(f"`{arg}` must be >= 1. Received: {value!r}")
    if getattr(model, "optimizer", None) is None:
        raise ValueError(
            "`model` must be compiled (with an optimizer and a loss) "
            "before it is profiled."
        )
    return batch_sizes


def _lookups(model, x, y) -> dict:
    """`{path: (lookups, unique ids, id bytes, dynamic)}` of one batch's
    tables."""
    variables = model.trainable_variables
    with key_watch.watching() as seen, tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x=x, y=y, y_pred=y_pred)
    grads = tape.gradient(loss, [v.value for v in variables])
    out = {}
    for v, g in zip(variables, grads, strict=True):
        if isinstance(g, tf.IndexedSlices):
            indices = g.indices.numpy()
            out[v.path] = (
                indices.size,
                np.unique(indices).size,
                indices.dtype.itemsize,
                False,
            )
    for layer, keys in seen.items():
        keys = np.concatenate(keys)
        out[layer.embeddings.path] = (keys.size, np.unique(keys).size, 8, True)
    return out


def _per_call(x, names, batch_size) -> list:
    """`[(lookups per sample, unique ids)]` of each call's input."""
    return [
        (np.size(x[n]) / batch_size, np.unique(np.asarray(x[n])).size)
        for n in names
    ]


def _step_seconds(model, make_batch, batch_size, warmup, steps) -> float:
    x, y = make_batch(batch_size, 0)
    for _ in range(warmup):  # trace and warm up
        model.train_on_batch(x, y)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _stats(variable, lookups, batch_sizes, calls) -> VariableStats:
    """Stats of one variable; `lookups` is `[(batch size, lookups, unique,
    id bytes, dynamic)]` (`_lookups`), `calls` is `[per batch][per call]`
    of `(lookups per sample, unique)` (batches in `batch_sizes` order)."""
    dtype_bytes = tf.as_dtype(variable.dtype).size
    shape = tuple(int(d) for d in variable.shape)
    if not lookups:
        return VariableStats(variable.path, "dense", shape, dtype_bytes)
    per_sample = np.mean([n / b for b, n, *_ in lookups])
    unique = tuple(
        float(np.mean([u for b2, _, u, *_ in lookups if b2 == b]))
        for b in batch_sizes
    )
    # The gradient holds every call's ids: with several calls, its unique
    # ids are those of the calls together, which a fused exchange moves.
    table_unique = unique
    per_sample, unique = (float(per_sample),), (unique,)
    if calls:
        per_batch = len(calls) // len(batch_sizes)
        per_call = np.array(calls, float)  # [batch, call, 2]
        per_sample = tuple(per_call[:, :, 0].mean(axis=0).tolist())
        unique = tuple(
            tuple(
                float(
                    per_call[i * per_batch : (i + 1) * per_batch, c, 1].mean()
                )
                for i in range(len(batch_sizes))
            )
            for c in range(per_call.shape[1])
        )
    return VariableStats(
        path=variable.path,
        kind="sparse",
        shape=shape,
        dtype_bytes=dtype_bytes,
        index_bytes=int(lookups[0][3]),
        lookups_per_sample=per_sample,
        batch_sizes=batch_sizes,
        unique=unique,
        table_unique=table_unique,
        dynamic=bool(lookups[0][4]),
    )
