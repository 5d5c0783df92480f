"""Optimizer gradient clipping on the gradients summed over workers.

Keras 3's TensorFlow optimizer clips (`clipnorm`, `global_clipnorm`,
`clipvalue`) in `apply`, before its update step sums the gradients over
replicas (`_all_reduce_sum_gradients`). Under a strategy each worker
would clip its own part of the sum, and N workers would train otherwise
than one process on the same global batch.

While a multi-worker `HybridStrategy` exists, clipping acts on the sums,
as one process clips the gradient of the global batch:
- `_clip_gradients` keeps only what one process does lookup by lookup:
  under `clipvalue`, the rows of an `IndexedSlices` gradient (a replicated
  table's) are clipped here, each worker's lookups being some of one
  process's. Under a norm it records each such gradient's local sum of
  squares. Everything else waits.
- `_all_reduce_sum_gradients` sums, then clips: a dense gradient by the
  norm of its sum; an `IndexedSlices` gradient by the norm one process
  takes over all its lookup rows (the local sums of squares, summed over
  workers in one all-reduce); under `clipvalue`, a dense gradient and a
  partitioned table's pushed rows element by element.

A partitioned table's norm is the sum, over its owners, of the squares of
the summed rows each holds, which joins the same all-reduce. Outside a
multi-worker `HybridStrategy` the clipping is Keras'.

Private hooks touched (Keras 3.15 / TF 2.21): `BaseOptimizer.
_clip_gradients`, called by `_backend_apply_gradients` before
`_backend_update_step`; `TFOptimizer._all_reduce_sum_gradients`, called by
`TFOptimizer._backend_update_step`.
"""

import weakref

import tensorflow as tf

from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.sparse import table_gradients
from keras_hybrid.strategy import hybrid_extended

# What `_clip_gradients` left to do, by optimizer, until its reduce:
# (the option, its value, by the position of each `IndexedSlices`
# gradient of lookup rows: its local sum of squares under a norm, None
# under `clipvalue`, which clipped it already).
_pending = weakref.WeakKeyDictionary()


def _option(optimizer):
    """The clipping `optimizer` does, as (name, value), or None."""
    for name in ("clipnorm", "global_clipnorm", "clipvalue"):
        value = getattr(optimizer, name, None)
        if value is not None and value > 0:
            return name, value
    return None


def _is_lookup_rows(grad) -> bool:
    """An `IndexedSlices` gradient one process would also hold as rows
    (not a partitioned table's pushed, already summed rows)."""
    return (
        isinstance(grad, tf.IndexedSlices)
        and table_gradients.table_of(grad) is None
    )


def _clip_gradients_of(original):
    def clip_gradients(optimizer, grads):
        option = _option(optimizer)
        if (
            option is None
            or hybrid_extended.multi_worker_step_strategy() is None
        ):
            return original(optimizer, grads)
        name, value = option
        grads = list(grads)
        squares = {}
        for i, grad in enumerate(grads):
            if not _is_lookup_rows(grad):
                continue
            if name == "clipvalue":
                grads[i] = _clip_values(grad, value)
                squares[i] = None  # done
            else:
                squares[i] = tf.reduce_sum(tf.square(grad.values))
        _pending[optimizer] = (name, value, squares)
        return grads

    return clip_gradients


def _all_reduce_sum_gradients_of(original):
    def all_reduce_sum_gradients(optimizer, grads_and_vars):
        reduced = list(original(optimizer, grads_and_vars))
        pending = _pending.pop(optimizer, None)
        strategy = hybrid_extended.multi_worker_step_strategy()
        if pending is None or strategy is None:
            return reduced
        name, value, squares = pending
        grads = [g for g, _ in reduced]
        if name == "clipvalue":
            # Rows clipped before the sum (`squares` holds their positions)
            # may come back summed into a dense tensor: not clipped again.
            grads = [
                g if i in squares else _clip_values(g, value)
                for i, g in enumerate(grads)
            ]
        else:
            grads = _clip_norms(
                grads, name, value, squares, strategy.communicator
            )
        return [(g, v) for g, (_, v) in zip(grads, reduced, strict=True)]

    return all_reduce_sum_gradients


def _clip_values(grad, value):
    return _map_values(grad, lambda v: tf.clip_by_value(v, -value, value))


def _clip_norms(grads, name, value, squares, communicator):
    """`grads` (summed) clipped by the norms one process would take.

    A replicated gradient's norm is the same on every worker. The parts of
    a norm that each worker holds are summed in one all-reduce: an
    `IndexedSlices` gradient of lookup rows (`squares`, taken before the
    sum) and a partitioned table's gradient, whose owners each hold the
    summed rows of their own ids (one row per id after the reduce)."""
    squares = dict(squares)
    for i, grad in enumerate(grads):
        if table_gradients.table_of(grad) is not None:
            squares[i] = tf.reduce_sum(tf.square(grad.values))
    positions = sorted(squares)
    summed = {}
    if positions:
        (total,) = communicator.all_reduce(
            [tf.stack([squares[i] for i in positions])],
            op="sum",
            path="control",
        )
        summed = {i: total[k] for k, i in enumerate(positions)}
    norms2 = {
        i: summed[i] if i in summed else tf.reduce_sum(tf.square(g))
        for i, g in enumerate(grads)
        if g is not None
    }
    if name == "global_clipnorm":
        norm = tf.sqrt(tf.add_n(list(norms2.values())))
        # Keras' `clip_by_global_norm`: NaN for a norm that is not finite.
        scale = value * tf.minimum(1.0 / norm, 1.0 / value) + (norm - norm)
        return [_scaled(g, scale) for g in grads]
    return [
        _scaled(g, _norm_scale(norms2[i], value)) if g is not None else g
        for i, g in enumerate(grads)
    ]


def _norm_scale(norm2, value):
    """`tf.clip_by_norm`'s factor for a squared norm `norm2`."""
    safe = tf.where(norm2 > 0.0, norm2, tf.ones_like(norm2))
    norm = tf.where(norm2 > 0.0, tf.sqrt(safe), norm2)
    return value / tf.maximum(norm, value)


def _scaled(grad, scale):
    return _map_values(grad, lambda v: v * tf.cast(scale, v.dtype))


def _map_values(grad, fn):
    """`fn` on a gradient's values: a tensor's, or an `IndexedSlices`'
    rows (its indices kept); None stays None."""
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
    return fn(grad)


PATCHES = PatchSet(
    "gradient_clipping",
    (
        Patch(
            PRIVATE_KERAS, "BaseOptimizer._clip_gradients", _clip_gradients_of
        ),
        Patch(
            PRIVATE_KERAS,
            "TFOptimizer._all_reduce_sum_gradients",
            _all_reduce_sum_gradients_of,
        ),
    ),
)
