"""Makes the logs of Keras' `train_step`/`test_step` global.

Keras' step returns `model.get_metrics_result()`, computed from this
worker's metric state. After the step, the state of all metrics is summed
over workers in one fused all-reduce and each metric's result is recomputed
from it with Keras' public `Metric.stateless_result`. Logs then hold exact
global values (not a mean of per-worker means) on every rank.
"""

import inspect

import keras
import tensorflow as tf

from keras_hybrid.strategy.global_read_variable import GlobalReadVariable
from keras_hybrid.strategy.global_read_variable import local_reads

_STEPS = ("train_step", "test_step")


def keras_model_of_step(fn):
    """Returns the Keras model if `fn` is its train/test step, else None."""
    try:
        fn = inspect.unwrap(fn)
    except ValueError:
        return None
    model = getattr(fn, "__self__", None)
    if isinstance(model, keras.Model) and fn.__name__ in _STEPS:
        return model
    return None


def globalize_logs(model, logs, communicator):
    """Replaces metric values in `logs` by their global values."""
    if not isinstance(logs, dict) or communicator.size == 1:
        return logs
    metrics = [m for m in model.metrics if m.variables]
    variables = [v for m in metrics for v in m.variables]
    if not variables or not all(
        isinstance(v.value, GlobalReadVariable) for v in variables
    ):
        return logs
    # This worker's copies: a global read here would reduce them once
    # more (a collective per variable) before `_reduce` sums them.
    with local_reads():
        local = [tf.convert_to_tensor(v.value) for v in variables]
    reduced = iter(_reduce(communicator, variables, local))
    global_logs = {}
    for metric in metrics:
        state = [next(reduced) for _ in metric.variables]
        result = metric.stateless_result(state)
        if isinstance(result, dict):
            global_logs.update(result)
        else:
            global_logs[metric.name] = result
    # A step may report only some of its metrics (keras-rs' multi-task
    # example leaves its top-k metric out of training): those it reports
    # become global; a name that is not a metric's stays as the step
    # computed it.
    return {
        **logs,
        **{name: v for name, v in global_logs.items() if name in logs},
    }


def _reduce(communicator, variables, local):
    """Sums (or averages) metric state in as few collectives as possible."""
    out = [None] * len(local)
    for op in ("sum", "mean"):
        picked = [i for i, v in enumerate(variables) if v.value.reduce_op == op]
        if picked:
            values = communicator.all_reduce(
                [local[i] for i in picked], op=op, path="control"
            )
            for i, value in zip(picked, values, strict=True):
                out[i] = value
    return out
