"""A `compute_loss` that averages over its own rows trains as on one process.

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

Private hooks touched: Keras' `Trainer._compute_loss` and
`scale_loss_for_distribution` (`_compat.keras` patch sites).
"""

import functools
import threading

import keras
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet

_COMPUTE = "Trainer._compute_loss"
_SCALE = "scale_loss_for_distribution"
_local = threading.local()
_told: set = set()


def note_scaled() -> None:
    """Counts one scaling of a loss (for `compute_loss` being checked)."""
    if getattr(_local, "count", None) is not None:
        _local.count += 1


def _counted(scale):
    @functools.wraps(scale)
    def counted(value):
        note_scaled()
        return scale(value)

    return counted


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


PATCHES = PatchSet(
    "loss_scaling",
    (
        Patch(PRIVATE_KERAS, _SCALE, _counted),
        Patch(PRIVATE_KERAS, _COMPUTE, _checked),
    ),
)
