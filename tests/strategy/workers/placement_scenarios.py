"""Pool scenario: trains every model shape of `placement_shapes` on N
workers, each on a strategy of its own.

Returns, per shape: the plan (kind, source, reason per path), the full
weights before and after training, and this rank's bytes per traffic path
during `fit`. Run by `test_placement_multiprocess.py`.
"""

import keras
import numpy as np
import placement_shapes as shapes  # noqa: I001  (sits beside this module)
import tensorflow as tf
from keras import ops

import keras_hybrid as kh

BYTES_ONLY = kh.Link(bandwidth="1gbit", latency="0")
STEPS = 3


def train_shapes(configs: list) -> dict:
    """Trains each (shape, optimizer, mode) of `configs`; mode is
    'hybrid' or 'allgather' (every variable replicated, stock TF)."""
    return {
        f"{shape}/{optimizer}/{mode}": _train(shape, optimizer, mode)
        for shape, optimizer, mode in configs
    }


def forced_sparse(shape: str) -> str:
    """Trains `shape` with `variable_kinds` making every table sparse;
    returns the error `fit` raised, or "" if it trained."""
    keras.backend.clear_session()
    with kh.HybridStrategy(
        timeout_seconds=60, variable_kinds={".*embeddings": "sparse"}
    ) as strategy:
        try:
            _fit(strategy, shape, "sgd")
        except ValueError as error:
            return str(error)
    return ""


def _train(shape: str, optimizer: str, mode: str) -> dict:
    keras.backend.clear_session()
    extra = {}
    if mode == "allgather":
        extra = {"variable_kinds": {".*": "dense"}, "indexed_slices": mode}
    with kh.HybridStrategy(
        timeout_seconds=60, link=BYTES_ONLY, **extra
    ) as strategy:
        return _fit(strategy, shape, optimizer)


def _fit(strategy, shape: str, optimizer: str) -> dict:
    keras.utils.set_random_seed(11 + strategy.rank)
    batch = shapes.BATCH
    x, y = shapes.make_data(STEPS, batch)
    with strategy.scope():
        model = shapes.BUILDERS[shape]()
        if not model.built and not shape.endswith("_unbuilt"):
            model(x[:batch])  # eagerly, as users build models
        model.compile(
            optimizer=shapes.make_optimizer(optimizer),
            loss=shapes.compile_loss(shape),
        )
    stats = strategy.communicator.stats
    before = stats.snapshot()
    if model.built:
        start = [np.asarray(w) for w in model.get_weights()]
        model.fit(x, y, batch_size=batch, shuffle=False, verbose=0)
    else:  # built by `fit` itself: weights from a first epoch of 0 steps
        model.fit(x, y, batch_size=batch, epochs=0, verbose=0)
        start = [np.asarray(w) for w in model.get_weights()]
        model.fit(x, y, batch_size=batch, shuffle=False, verbose=0)
    sent = stats.delta(before)
    # Whole reads between steps: eagerly, the whole table (gathered from
    # every worker); in a `tf.function` of the user's own, an error.
    eager_sums = [float(ops.sum(w)) for w in model.weights]
    function_error = ""
    sparse_paths = {
        v.path for v in strategy.plan.variables if v.kind == "sparse"
    }
    sparse = [w for w in model.weights if w.path in sparse_paths]
    if sparse:
        try:
            tf.function(lambda: ops.sum(sparse[0]))()
        except ValueError as error:
            function_error = str(error)
    return {
        "eager_sums": eager_sums,
        "function_error": function_error,
        "plan": {
            v.path: (v.kind, v.source, v.reason)
            for v in strategy.plan.variables
        },
        "plan_text": str(strategy.plan),
        "start": start,
        "end": [np.asarray(w) for w in model.get_weights()],
        "sent": sent,
        "rank": strategy.rank,
        "size": strategy.size,
    }
