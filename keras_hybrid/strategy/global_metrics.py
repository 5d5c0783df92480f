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

from keras_hybrid.strategy import batch_share
from keras_hybrid.strategy import loss_reading
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


def reported_scalars(logs) -> dict:
    """The floating-point scalars among `logs` (one level of nesting), by
    key (`name`, or `(name, inner name)`): a step's own values, which
    `one_process_value` combines over workers."""
    found = {}
    for name, value in logs.items():
        inner = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, leaf in inner:
            if (
                isinstance(leaf, tf.Tensor)
                and leaf.dtype.is_floating
                and leaf.shape.rank == 0
            ):
                found[name if sub is None else (name, sub)] = leaf
    return found


def one_process_value(value, total, weighted, rows):
    """What one process computes for a scalar each worker computed as
    `value`, from the sums over workers of `value` (`total`), of `value`
    times the worker's rows (`weighted`) and of the rows (`rows`): the
    total for this worker's part of a sum over the global batch (a scaled
    loss, `ops.sum`), the rows-weighted mean for a mean of this worker's
    rows (`loss_reading.reading`). A value every worker holds alike (an
    all-reduced count) stays as it is."""
    if batch_share.is_scaled(value):
        how = loss_reading.SUM
    else:
        how = loss_reading.reading(value)
    mean = tf.math.divide_no_nan(weighted, rows)
    if how == loss_reading.SUM:
        combined = total
    elif how == loss_reading.MEAN:
        combined = mean
    else:
        combined = tf.where(tf.equal(rows, how), total, mean)
    return tf.cast(combined, value.dtype)


def global_logs(model, logs, reduced, local, own_values):
    """`logs` with each metric's value recomputed from `reduced`, its state
    reduced over workers (`local`: this worker's, both in `metric_state`'s
    order), and each other floating-point scalar the step returned
    replaced by what one process computes for it (`own_values`, keyed as
    `reported_scalars` keys them)."""
    values = _results(model, reduced)
    local_values = _results(model, local)
    # A step may report only some of its metrics (keras-rs' multi-task
    # example leaves its top-k metric out of training): those it reports
    # become global. A step written as Keras' guide writes it returns
    # `{m.name: m.result()}`, which nests the compiled metrics' dict.

    def chosen(key, name, value):
        own = own_values.get(key, value)
        if name not in values:
            return own
        return _global_if_result(value, local_values[name], values[name], own)

    return {
        name: {k: chosen((name, k), k, w) for k, w in v.items()}
        if isinstance(v, dict)
        else chosen(name, name, v)
        for name, v in logs.items()
    }


def _results(model, state) -> dict:
    """Each metric's result from `state` (its variables' values, in
    `metric_state`'s order), by name."""
    state = iter(state)
    values = {}
    for metric in (m for m in model.metrics if m.variables):
        result = metric.stateless_result(
            [next(state) for _ in metric.variables]
        )
        if isinstance(result, dict):
            values.update(result)
        else:
            values[metric.name] = result
    return values


def _global_if_result(value, local, global_value, own):
    """The metric's global result where the step reported its result (the
    value this worker's state gives), else `own`, the step's own value
    combined over workers as one process computes it: a user's
    `train_step` may return a tensor of its own under a metric's name,
    such as its raw loss as `"loss"` beside Keras' loss tracker, which it
    never updated."""
    try:
        value = tf.convert_to_tensor(value)
        local = tf.cast(local, value.dtype)
        global_value = tf.cast(global_value, value.dtype)
        own = tf.cast(own, value.dtype)
    except (TypeError, ValueError):
        return global_value
    if not value.shape.is_compatible_with(local.shape):
        return own
    same = tf.reduce_all(tf.equal(value, local))
    return tf.where(same, global_value, own)
