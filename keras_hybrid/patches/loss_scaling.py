"""Losses the workers' summed gradients need scaled are scaled once.

Under any `tf.distribute` strategy Keras expects a step's loss divided by
the number of workers: its loss reductions do that
(`scale_loss_for_distribution`), the workers' gradients are then summed,
and the loss tracker multiplies back. A model that overrides
`compute_loss` and averages by itself (keras-rs' SASRec example:
`reduction=None`, then `divide_no_nan(sum(loss), sum(sample_weight))`,
written for JAX) returns an unscaled loss: on N workers it trained with N
times the gradient and logged N times the loss.

While a multi-worker strategy is open, Keras' `Trainer._compute_loss`
runs the model's `compute_loss` and counts the calls to
`scale_loss_for_distribution` it made. If an overridden `compute_loss`
made none, no part of its loss was scaled, so the whole loss is scaled
here, once, and a line says so. One that scaled some of it (a Keras loss
with the default reduction, `super().compute_loss`) is left as it is.

A `train_step` that computes its own gradients (keras-io's VAE, GAN,
contrastive and distillation examples: `tape.gradient(loss)`, then
`optimizer.apply_gradients`) is held to one rule, per gradient tape:
- a loss scaled for distribution while the tape recorded (a Keras loss
  with a reducing reduction, `scale_loss_for_distribution`,
  `tf.nn.compute_average_loss`, as a step written for `MirroredStrategy`
  does) keeps its gradients summed over the workers;
- a loss that is a sum (a target that is not a scalar, which
  `tape.gradient` sums, or a scalar made of `Sum`s added and scaled by
  constants, such as a Keras loss with `reduction="sum"` or
  `ops.sum(per_example) / GLOBAL_BATCH`) keeps them summed too: the
  workers' sum is the global batch's;
- any other loss (a scalar the step averaged over its own rows) gets the
  gradients of its variables averaged over the workers, each weighted by
  its rows (the tape's upstream gradient is this worker's share of the
  global batch, `strategy.batch_share`: `1/N` for even batches), and a
  line says so once. Gradients of
  tensors (a gradient penalty's) are never summed over workers and stay
  as they are.
Two tapes in one step (a GAN's two optimizers) each follow the rule.

Keras' own `scale_loss_for_distribution` (its `1/N`) and
`unscale_loss_for_distribution` (the loss tracker's inverse) use the same
share, so a global batch that does not split evenly trains and logs as
on one process.

A scaled loss (what `scale_loss_for_distribution` returns, and
`Model.compute_loss`'s total in a step) is marked
(`strategy.batch_share.mark_scaled`), and a mean metric
(`keras.metrics.Mean.update_state`) given that very tensor unscales it
first, as Keras' loss tracker does: a step written as Keras' guide writes
it (`loss = self.compute_loss(...)`, then `metric.update_state(loss)`)
logs one process's loss, not `1/N` of it. A scalar given to a mean
metric with no weight (each output's loss, which Keras' `CompileLoss`
records with the batch's static size, unknown in most pipelines) counts
once per step on one process; each worker weighs it by its share of the
global batch, so the workers' summed state counts the global batch's
mean once too, also when the batch does not split evenly.

Private hooks touched: Keras' `Trainer._compute_loss`,
`scale_loss_for_distribution` and `unscale_loss_for_distribution`
(`_compat.keras` patch sites). Public ones:
`tf.GradientTape.__enter__`, `__exit__` and `gradient`,
`tf.nn.compute_average_loss`, `keras.Model.compute_loss` and
`keras.metrics.Mean.update_state`.
"""

import functools
import threading
import weakref

import keras
import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy import batch_share
from keras_hybrid.strategy import hybrid_extended
from keras_hybrid.strategy import loss_reading

_COMPUTE = "Trainer._compute_loss"
_SCALE = "scale_loss_for_distribution"
_UNSCALE = "unscale_loss_for_distribution"
_local = threading.local()
_told: set = set()
# Per gradient tape: [how many losses were scaled while it recorded].
_scalings: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# Losses that read as a sum or a mean by the step's global batch size
# (see `loss_reading.reading`), and whether each is a sum (a boolean
# tensor), by the loss's `id` (a traced tensor lives as long as its graph).
_maybe_sums: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_is_sum_now: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def note_scaled() -> None:
    """Counts one scaling of a loss, for the `compute_loss` being checked
    and for every gradient tape recording now."""
    if getattr(_local, "count", None) is not None:
        _local.count += 1
    for frame in getattr(_local, "tapes", ()):
        frame[0] += 1


def _by_share(scale, inverse: bool = False):
    """Keras' scaling by `1 / N`, or its inverse, replaced by this worker's
    share of the global batch (`strategy.batch_share`): exact for batches
    that do not split evenly, and following an elastic group's size."""

    @functools.wraps(scale)
    def scaled(value):
        strategy = tf.distribute.get_strategy()
        if not hybrid_extended.is_hybrid(strategy):
            return scale(value)
        if not inverse:
            note_scaled()
        value = tf.convert_to_tensor(value)
        factor = tf.cast(
            batch_share.factor(strategy.extended.communicator), value.dtype
        )
        if inverse:
            # A worker with no rows this step has share 0: its (zero) loss
            # stays 0 for the tracker, which weighs it by its 0 rows.
            return tf.math.divide_no_nan(value, factor)
        return batch_share.mark_scaled(value * factor)

    return scaled


def _marked_total_of(compute_loss):
    """`Model.compute_loss`, whose total (each loss scaled for
    distribution, then added) is marked as a scaled loss inside a step of
    a multi-worker strategy."""

    @functools.wraps(compute_loss)
    def marked(self, *args, **kwargs):
        loss = compute_loss(self, *args, **kwargs)
        if (
            loss is not None
            and hybrid_extended.multi_worker_step_strategy() is not None
        ):
            batch_share.mark_scaled(loss)
        return loss

    return marked


def _unscaling_update_of(update_state):
    """`keras.metrics.Mean.update_state` (every mean metric), which takes a
    scaled loss back to the worker's own loss, as Keras' loss tracker
    does: a `train_step` written as Keras' guide writes it
    (`loss = self.compute_loss(...)`, then `metric.update_state(loss)`)
    logs what the built-in step logs, not `1/N` of it. A scalar given
    with no weight counts once per step on one process; here each worker
    weighs it by its share of the global batch (`_share_weighted`)."""

    @functools.wraps(update_state)
    def update(self, values, *args, **kwargs):
        if batch_share.is_scaled(values):
            values = keras_compat.current(_UNSCALE)(values)
        elif _maybe_sums.get(id(values)) is values:
            # A sum over the global batch or a mean of this worker's rows,
            # decided when the step runs (`loss_reading.reading`).
            values = tf.where(
                _is_sum_now[id(values)],
                keras_compat.current(_UNSCALE)(values),
                values,
            )
        if not args and kwargs.get("sample_weight") is None:
            values, kwargs = _share_weighted(self, values, kwargs)
        return update_state(self, values, *args, **kwargs)

    return update


def _share_weighted(metric, values, kwargs):
    """`(values, kwargs)` for a mean metric given a scalar with no weight
    in a step of several workers: the scalar (a mean over this worker's
    rows, such as each output's loss that Keras' `CompileLoss` records
    with the batch's static size, `None` when the batch size is not
    fixed) weighed by this worker's share of the global batch. One
    process counts the global batch's mean once per step; the workers'
    summed states then do too, also when the batch does not split evenly
    (a plain weight of 1 per worker averages the workers' means). A
    worker with no rows adds nothing."""
    strategy = hybrid_extended.multi_worker_step_strategy()
    if strategy is None:
        return values, kwargs
    values = tf.convert_to_tensor(values)
    if values.shape.rank != 0:
        return values, kwargs
    share = batch_share.factor(strategy.extended.communicator)
    weight = tf.cast(share, metric.dtype)
    values = tf.where(share > 0, values, tf.zeros_like(values))
    return values, {**kwargs, "sample_weight": weight}


def _checked(compute):
    @functools.wraps(compute)
    def checked(self, *args, **kwargs):
        if type(self).compute_loss is keras.Model.compute_loss:
            return compute(self, *args, **kwargs)
        outer = getattr(_local, "count", None)
        _local.count = 0
        try:
            loss = compute(self, *args, **kwargs)
            scaled = _local.count
        finally:
            _local.count = outer
        if scaled or loss is None:
            return loss
        name = type(self).__name__
        if name not in _told:
            _told.add(name)
            logging.info(
                "keras-hybrid: %s.compute_loss returned a loss no Keras loss "
                "reduction divided by the number of workers (it averages "
                "over its own rows); it is divided here, so that the "
                "workers' summed gradients are their mean, as on one "
                "process.",
                name,
            )
        return keras_compat.current(_SCALE)(loss)

    return checked


def _enter_of(enter):
    @functools.wraps(enter)
    def __enter__(self):
        frame = _scalings.setdefault(self, [0])
        _local.__dict__.setdefault("tapes", []).append(frame)
        return enter(self)

    return __enter__


def _exit_of(exit_):
    @functools.wraps(exit_)
    def __exit__(self, *exc_info):
        tapes = getattr(_local, "tapes", [])
        frame = _scalings.get(self)
        if any(f is frame for f in tapes):
            del tapes[max(i for i, f in enumerate(tapes) if f is frame)]
        return exit_(self, *exc_info)

    return __exit__


def _gradient_of(gradient):
    @functools.wraps(gradient)
    def tape_gradient(
        self, target, sources, output_gradients=None, *args, **kwargs
    ):
        factor = _averaged_over(self, target, sources)
        if factor is not None:
            output_gradients = _upstream(target, output_gradients, factor)
        return gradient(
            self, target, sources, output_gradients, *args, **kwargs
        )

    return tape_gradient


def _averaged_over(tape, target, sources):
    """This worker's share of the global batch (a tensor) if the gradients
    of `target` must be averaged over the workers, else None (see the
    module docstring). Only
    gradients of variables are summed over workers; gradients of tensors
    (a gradient penalty, the strategy's own row-wise regularizers) stay
    as they are."""
    strategy = hybrid_extended.multi_worker_step_strategy()
    frame = _scalings.get(tape)
    if (
        frame is None
        or frame[0]
        or strategy is None
        or not all(_is_variable(s) for s in tf.nest.flatten(sources))
    ):
        return None
    targets = tf.nest.flatten(target)
    readings = [loss_reading.reading(t) for t in targets]
    if not readings:
        return None
    if loss_reading.SUM in readings:
        for loss, reading in zip(targets, readings, strict=True):
            if reading == loss_reading.SUM and loss.shape.rank == 0:
                # This worker's part of the global sum: a mean metric
                # given it logs the global value, as for a Keras loss.
                batch_share.mark_scaled(loss)
        return None
    if "train_step" not in _told:
        _told.add("train_step")
        logging.info(
            "keras-hybrid: a step differentiates a loss that no Keras loss "
            "reduction scaled for %d workers (it averages over its own "
            "rows): its gradients are averaged over the workers, as one "
            "process computes them on the global batch. A loss scaled "
            "with `scale_loss_for_distribution` or "
            "`tf.nn.compute_average_loss` keeps them summed "
            "(docs/strategy.md).",
            strategy.size,
        )
    share = batch_share.factor(strategy.communicator)
    divisors = [r for r in readings if r != loss_reading.MEAN]
    global_rows = batch_share.global_rows()
    if not divisors or global_rows is None:
        return share
    # A `Sum` divided by the global batch's rows is a sum; by only this
    # worker's rows, a mean (see `loss_reading.reading`).
    is_global = tf.reduce_any(
        [tf.equal(global_rows, float(d)) for d in divisors]
    )
    for loss, reading in zip(targets, readings, strict=True):
        if reading != loss_reading.MEAN:
            _maybe_sums[id(loss)] = loss
            _is_sum_now[id(loss)] = is_global
    return tf.where(is_global, tf.ones_like(share), share)


def _is_variable(source) -> bool:
    return isinstance(source, (tf.Variable, keras.Variable))


def _upstream(target, output_gradients, factor):
    """`output_gradients` (ones if None) times `factor`."""
    targets = tf.nest.flatten(target)
    if output_gradients is None:
        given = [tf.ones_like(t) for t in targets]
    else:
        given = tf.nest.flatten(output_gradients)
    scaled = [g * tf.cast(factor, g.dtype) for g in given]
    return tf.nest.pack_sequence_as(target, scaled)


def _average_loss_of(compute_average_loss):
    @functools.wraps(compute_average_loss)
    def counted(*args, **kwargs):
        note_scaled()
        # This worker's part of the global batch's mean: a mean metric
        # given it, and the logs it is returned in, read the global mean.
        return batch_share.mark_scaled(compute_average_loss(*args, **kwargs))

    return counted


PATCHES = PatchSet(
    "loss_scaling",
    (
        Patch(PRIVATE_KERAS, _SCALE, _by_share),
        Patch(
            PRIVATE_KERAS,
            _UNSCALE,
            lambda unscale: _by_share(unscale, inverse=True),
        ),
        Patch(PRIVATE_KERAS, _COMPUTE, _checked),
        Patch(keras.Model, "compute_loss", _marked_total_of),
        Patch(keras.metrics.Mean, "update_state", _unscaling_update_of),
        Patch(tf.GradientTape, "__enter__", _enter_of),
        Patch(tf.GradientTape, "__exit__", _exit_of),
        Patch(tf.GradientTape, "gradient", _gradient_of),
        Patch(tf.nn, "compute_average_loss", _average_loss_of),
    ),
)
