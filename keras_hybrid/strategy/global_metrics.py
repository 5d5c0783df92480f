"""Makes the logs of Keras' `train_step`/`test_step` global.

Keras' step returns `model.get_metrics_result()`, computed from this
worker's metric state. After the step, the state of all metrics is summed
over workers (in the step's one fused all-reduce of its state,
`strategy.step_state`) and each metric's result is recomputed from it with
Keras' public `Metric.stateless_result`. Logs then hold exact global
values (not a mean of per-worker means) on every rank.
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


def metric_state(model, logs, communicator):
    """This worker's copies of the state of `model`'s metrics, when `logs`
    are to be made global: `(variables, local values)`, else `None`."""
    if not isinstance(logs, dict) or communicator.size == 1:
        return None
    metrics = [m for m in model.metrics if m.variables]
    variables = [v for m in metrics for v in m.variables]
    if not variables or not all(
        isinstance(v.value, GlobalReadVariable) for v in variables
    ):
        return None
    # This worker's copies: a global read here would reduce them once
    # more (a collective per variable) before they are summed.
    with local_reads():
        local = [tf.convert_to_tensor(v.value) for v in variables]
    return variables, local


def is_mean(variable) -> bool:
    """True if the metric state `variable` is averaged, not summed, over
    workers."""
    return variable.value.reduce_op == "mean"


def global_logs(model, logs, reduced):
    """`logs` with each metric's value recomputed from `reduced`, its state
    reduced over workers (in `metric_state`'s order)."""
    reduced = iter(reduced)
    values = {}
    for metric in (m for m in model.metrics if m.variables):
        state = [next(reduced) for _ in metric.variables]
        result = metric.stateless_result(state)
        if isinstance(result, dict):
            values.update(result)
        else:
            values[metric.name] = result
    # A step may report only some of its metrics (keras-rs' multi-task
    # example leaves its top-k metric out of training): those it reports
    # become global; a name that is not a metric's stays as the step
    # computed it. A step written as Keras' guide writes it returns
    # `{m.name: m.result()}`, which nests the compiled metrics' dict.
    return {
        name: {k: values.get(k, w) for k, w in v.items()}
        if isinstance(v, dict)
        else values.get(name, v)
        for name, v in logs.items()
    }
