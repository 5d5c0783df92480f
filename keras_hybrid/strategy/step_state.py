"""After a train or test step, one all-reduce for the state it left.

A step leaves two kinds of state that differ between workers: its
metrics' state (each worker counted its own rows: `global_metrics`) and
the layer state it assigned (`BatchNormalization`'s moving statistics:
`averaged_state`). Both are read only after the step, so they ride one
sum all-reduce (a mean is that sum over the number of workers), not one
collective per kind and reduce op.

Neither can join the step's dense-gradient all-reduce: Keras' `train_step`
updates the metrics after `optimizer.apply`, which reduces the gradients,
and the moving statistics ride with the metrics, being just as small.
"""

import tensorflow as tf

from keras_hybrid.strategy import averaged_state
from keras_hybrid.strategy import global_metrics


def reduce_after_step(model, assigned, logs, communicator, rows=None):
    """Averages the layer state the step assigned (`assigned`: the ids
    `averaged_state.recording` noted) and returns `logs` with global metric
    values, and one process's value of each other scalar the step returned
    (`rows`: this worker's batch rows, which weigh means), in one fused
    all-reduce."""
    state = averaged_state.averaged(model, assigned)
    metrics = global_metrics.metric_state(model, logs, communicator)
    if communicator.size == 1 or not (state or metrics):
        return logs
    values = [tf.convert_to_tensor(v.value) for v in state]
    means = [True] * len(state)
    scalars = {}
    if metrics is not None:
        variables, local = metrics
        values += local
        means += [global_metrics.is_mean(v) for v in variables]
        scalars = global_metrics.reported_scalars(logs)
        if scalars:
            weight = tf.cast(1 if rows is None else rows, tf.float32)
            values.append(weight)
            for value in scalars.values():
                value = tf.cast(value, tf.float32)
                values += [value, value * weight]
            means += [False] * (1 + 2 * len(scalars))
    # Moving statistics are model weights (the dense path); metric state
    # alone is bookkeeping (the control path).
    path = "dense" if state else "control"
    summed = communicator.all_reduce(values, op="sum", path=path)
    size = communicator.size_tensor()
    reduced = [
        total / tf.cast(size, total.dtype) if mean else total
        for total, mean in zip(summed, means, strict=True)
    ]
    for variable, mean in zip(state, reduced, strict=False):
        variable.value.assign(mean)
    if metrics is None:
        return logs
    variables, local = metrics
    reduced = reduced[len(state) :]
    own_values = {}
    if scalars:
        total_rows, *sums = reduced[len(variables) :]
        for i, (key, value) in enumerate(scalars.items()):
            own_values[key] = global_metrics.one_process_value(
                value, sums[2 * i], sums[2 * i + 1], total_rows
            )
    return global_metrics.global_logs(
        model, logs, reduced[: len(variables)], local, own_values
    )
