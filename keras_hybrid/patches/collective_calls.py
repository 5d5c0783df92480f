"""Fences Keras' collective calls while a multi-worker strategy exists.

Under `HybridStrategy` `fit`, `evaluate`, `predict` (whose rows are
gathered, `global_predictions`), `predict_on_batch`, `train_on_batch`,
`test_on_batch` and the `get_weights` of a layer holding a partitioned
table are collectives. `install` wraps these `keras.Model` and
`keras.layers.Layer` methods so that they first agree across workers on
the call (`call_fence`). Calls of models outside any `HybridStrategy` and
`get_weights` of layers without partitioned tables are unchanged, but
`fit` and `train_on_batch` of such a model log a warning, once per model:
each worker trains its own copy.
Saves are fenced where `chief_writes` routes them, sharded checkpoints
and `ShardedTable.numpy` where they are defined. `predict` and
`predict_on_batch` also turn on `global_predictions.gathering()`, and
`predict_on_batch` passes on only this worker's slice of its batch.
Each model call first turns off a `jit_compile=True` (`xla_off`), and
`fit` refuses callbacks that would save dynamic tables as Keras weights
files (`checkpoint.weight_callbacks`).

Public methods patched (Keras 3.15): `keras.Model.fit`, `evaluate`,
`predict`, `predict_on_batch`, `train_on_batch`, `test_on_batch` (set on
`keras.Model`, which inherits them from the backend trainer) and
`keras.layers.Layer.get_weights`.
"""

import functools
import inspect
import weakref

import keras
from absl import logging

from keras_hybrid.checkpoint import weight_callbacks
from keras_hybrid.comm import call_fence
from keras_hybrid.comm.call_fence import CallFence
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.sparse.sharded_table import ShardedTable
from keras_hybrid.strategy import cluster
from keras_hybrid.strategy import global_predictions
from keras_hybrid.strategy import hybrid_extended
from keras_hybrid.strategy import xla_off

_MODEL_CALLS = (
    "fit",
    "evaluate",
    "predict",
    "predict_on_batch",
    "train_on_batch",
    "test_on_batch",
)
_GATHERED = ("predict", "predict_on_batch")
_TRAINING = ("fit", "train_on_batch")

# Models warned of by `_warn_unsynchronized`.
_warned = weakref.WeakSet()


def _follow(strategy) -> None:
    """Fences collective calls with `strategy`'s communicator; `None`
    turns the fence off."""
    if strategy is None:
        call_fence.uninstall()
        return
    call_fence.install(
        CallFence(
            strategy.communicator,
            strategy.communicator.timeout_seconds,
            cluster.watchdog() if strategy.engine == "tf" else None,
        )
    )


def _fenced_model_call(name: str):
    call = f"model.{name}"
    gathers = name in _GATHERED

    def make(original):
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            if not _is_multi_worker(self.distribute_strategy):
                if name in _TRAINING:
                    _warn_unsynchronized(self, call)
                return original(self, *args, **kwargs)
            xla_off.turn_off(self, self.distribute_strategy.size)
            if name == "fit":
                bound = signature.bind(self, *args, **kwargs).arguments
                weight_callbacks.check(
                    self,
                    bound.get("callbacks"),
                    self.distribute_strategy.size,
                )
            if not gathers:
                with call_fence.fenced(call):
                    return original(self, *args, **kwargs)
            if name == "predict_on_batch":
                args, kwargs = _local_batch(self, args, kwargs)
            with call_fence.fenced(call), global_predictions.gathering():
                return original(self, *args, **kwargs)

        return wrapper

    return make


def _warn_unsynchronized(model, call: str) -> None:
    """Warns, once per model, that `model`, built outside every
    `HybridStrategy` while a multi-worker one is open, trains on each
    worker alone: nothing exchanges its gradients unless the user's code
    does (Horovod's `DistributedOptimizer`, say), so it is not refused."""
    # Installed exactly while a multi-worker strategy is in use.
    fence = call_fence.active()
    if (
        fence is None
        or hybrid_extended.is_hybrid(model.distribute_strategy)
        or model in _warned
    ):
        return
    _warned.add(model)
    logging.warning(
        "keras-hybrid: model %r was built outside `strategy.scope()` while "
        "a HybridStrategy of %d workers is open: `%s` trains a separate "
        "copy on each worker, and the strategy exchanges none of its "
        "gradients. Build and compile the model under `with "
        "strategy.scope():` (`with HybridStrategy() as strategy:` does not "
        "enter it).",
        model.name,
        fence.communicator.size,
        call,
    )


def _fenced_get_weights(original):
    @functools.wraps(original)
    def wrapper(self):
        if not _holds_table(self):
            return original(self)
        kind = "model" if isinstance(self, keras.Model) else "layer"
        with call_fence.fenced(f"{kind}.get_weights"):
            return original(self)

    return wrapper


def _local_batch(model, args, kwargs):
    """`predict_on_batch`'s arguments with this worker's slice of `x`."""
    strategy = model.distribute_strategy
    if args:
        x = global_predictions.local_slice(
            args[0], strategy.rank, strategy.size
        )
        return (x, *args[1:]), kwargs
    x = global_predictions.local_slice(
        kwargs["x"], strategy.rank, strategy.size
    )
    return args, {**kwargs, "x": x}


def _is_multi_worker(strategy) -> bool:
    # The cluster's size: an elastic joiner counts as one worker until
    # admitted, but its `fit` is the members' (their `evaluate` inside it
    # must not be fenced on its own).
    return (
        hybrid_extended.is_hybrid(strategy) and strategy._cluster_info.size > 1
    )


def _holds_table(layer) -> bool:
    return any(
        isinstance(getattr(v, "value", None), ShardedTable)
        for v in layer.weights
    )


PATCHES = PatchSet(
    "collective_calls",
    (
        *(
            Patch(keras.Model, name, _fenced_model_call(name))
            for name in _MODEL_CALLS
        ),
        Patch(keras.layers.Layer, "get_weights", _fenced_get_weights),
    ),
    follow=_follow,
)
