"""Placement by use, run before a step's first trace: traces the step (and
the inference steps `fit` will run) on its own data to see how each
provisional table is read, and hands the uses to the `VariableRouter`."""

import inspect

import keras
from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.plan import use_discovery
from keras_hybrid.strategy import global_metrics


def place_by_use(router, fn, args, kwargs) -> None:
    """Decides provisional tables from how `fn` reads them, before it runs
    (see `plan.use_discovery` and `VariableRouter.decide`)."""
    if use_discovery.active():
        return
    router.prepare_partitioned()
    if not router.undecided():
        return
    router.prepare()
    if router.undecided():
        uses = use_discovery.trace(fn, args, kwargs)
        model = global_metrics.keras_model_of_step(fn)
        for steps in _inference_steps_of(model, fn):
            # Placement is final after this step: a table that only
            # `evaluate` or `predict` reads whole (keras-rs'
            # `BruteForceRetrieval` scores every candidate row) must stay
            # dense now, not fail when validation starts.
            other = _first_trace(model, steps, args, kwargs)
            if other is not None:
                use_discovery.add_whole_reads(uses, other)
        router.decide(uses)


def _inference_steps_of(model, fn) -> list:
    """When `fn` is the `train_step` of `model` (a Keras model or None):
    its `test_step`, then its `predict_step` if the model overrides it,
    each as a list of steps to trace in order until one traces (they take
    the training data).
    Keras' `predict_step` runs the forward pass `test_step` runs, so it
    stands in for a `test_step` that cannot trace (a model compiled
    without a loss, whose losses only `train_step` adds). Else none."""
    if model is None or inspect.unwrap(fn).__name__ != "train_step":
        return []
    if type(model).predict_step is not keras.Model.predict_step:
        return [[model.test_step], [model.predict_step]]
    return [[model.test_step, model.predict_step]]


def _first_trace(model, steps, args, kwargs):
    """The table uses of the first of `steps` (of `model`) that traces on
    the training data, or None (each failure is logged)."""
    for step in steps:
        try:
            with keras_compat.unbuilt_if_failed(model):
                return use_discovery.trace(step, args, kwargs)
        except Exception as error:  # noqa: BLE001 (a scratch trace)
            logging.info(
                "keras-hybrid: placement could not trace %s on the "
                "training data (%s); its whole reads are not seen.",
                step.__name__,
                error,
            )
    return None
