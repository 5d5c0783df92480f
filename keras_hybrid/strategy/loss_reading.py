"""How a step's scalar combines over workers: a sum or a mean.

A loss (or any scalar a step computes) is either this worker's part of a
sum over the global batch, whose workers' values add up to one process's,
or a mean of this worker's rows, whose workers' values one process
weights by their rows. `reading` tells which from how the traced step
made it. `patches/loss_scaling.py` combines gradients by it, and
`step_state` the scalars a step returns.
"""

import tensorflow as tf

SUM, MEAN = "sum", "mean"
# Ops a value passes through unchanged.
_PASS_THROUGH = ("Identity", "Cast", "StopGradient", "Squeeze")


def reading(tensor):
    """How the workers' gradients of `tensor` combine: `SUM`: a sum (not
    a scalar, which `tape.gradient` sums, or, in a traced step, made of
    `Sum`s and row counts (`ops.shape(x)[0]`) by adding, subtracting and
    scaling by constants: `ops.sum(x) / GLOBAL_BATCH`, `2 * ops.sum(x)`,
    the batch's rows); `MEAN`: any other
    scalar; a number `d`: a `Sum` divided by `d`, where `d` is also the
    rows the `Sum` saw here (its input's static shape), which reads as a
    sum if the step's global batch has `d` rows (`ops.sum(x) / 16` with a
    global batch of 16) and as a mean of this worker's rows otherwise
    (`ops.sum(x) / x.shape[0]`)."""
    if not tf.is_tensor(tensor):
        return MEAN
    if tensor.shape.rank != 0:
        return SUM
    if tf.executing_eagerly() or not hasattr(tensor, "op"):
        return MEAN
    return _combined_reading(tensor)


def _combined_reading(tensor):
    op = _skip_pass_through(tensor.op)
    if op.type == "Sum" or _counts_rows(op):
        return SUM
    if op.type in ("AddV2", "Add", "Sub", "AddN"):
        return _joined([_combined_reading(t) for t in op.inputs])
    if op.type == "Neg":
        return _combined_reading(op.inputs[0])
    if op.type == "Mul":
        for summed, weight in (op.inputs, reversed(op.inputs)):
            scale = _constant(weight)
            if scale:
                return _scaled_reading(summed, 1.0 / scale)
        return MEAN
    if op.type in ("RealDiv", "Div", "TrueDiv", "DivNoNan"):
        divisor = _constant(op.inputs[1])
        if divisor:
            return _scaled_reading(op.inputs[0], divisor)
    return MEAN


def _scaled_reading(summed, divisor: float):
    if _combined_reading(summed) != SUM:
        return MEAN
    return divisor if _rows_summed(summed, divisor) else SUM


def _joined(readings: list):
    """One reading of a sum of terms: a sum if every term is; one
    ambiguous divisor if every other term is a sum; else a mean."""
    open_ = {r for r in readings if r != SUM}
    if not open_:
        return SUM
    if len(open_) == 1 and MEAN not in open_:
        return open_.pop()
    return MEAN


def _counts_rows(op) -> bool:
    """Whether `op` counts this worker's rows: the leading size of a
    tensor's dynamic shape (`ops.shape(x)[0]`, `tf.shape(x)[0]`) or a
    dynamic `tf.size`. TF folds a fully known shape into a constant, so a
    dynamic one has an unknown dimension: the batch's."""
    if op.type == "Size":
        return True
    if op.type != "StridedSlice" or op.inputs[0].op.type != "Shape":
        return False
    begin = tf.get_static_value(op.inputs[1])
    return begin is not None and begin.size == 1 and int(begin[0]) == 0


def _skip_pass_through(op):
    while op.type in _PASS_THROUGH and op.inputs:
        op = op.inputs[0].op
    return op


def _constant(tensor):
    """The scalar value of `tensor` if the graph fixes it, else None."""
    value = tf.get_static_value(tensor)
    if value is None or getattr(value, "size", 1) != 1:
        return None
    return float(value)


def _rows_summed(summed, divisor: float) -> bool:
    """Whether `summed` is one `Sum` whose input has, statically, `divisor`
    rows (or elements in its leading dimensions)."""
    op = _skip_pass_through(summed.op)
    if op.type != "Sum" or op.inputs[0].shape.rank is None:
        return False
    count = 1
    for size in op.inputs[0].shape:
        if size is None:
            return False
        count *= size
        if abs(count - divisor) <= 1e-6 * count:
            return True
    return False
