"""Where an optimizer stands in its gradient-accumulation cycle.

With `gradient_accumulation_steps=k`, each worker adds its own part of
every step's dense gradients to its accumulators, and the parts are
summed over the workers once, at the k-th step. Between two such steps
the accumulators differ from worker to worker, and no worker holds the
sum: a worker that joins would start from a copy of another's part, one
that leaves would take its part away, and a commit restored after a lost
worker would lack the lost part. An elastic job changes its members and
commits only between cycles (`elastic.resize`, `elastic.commit`).
"""

import keras

from keras_hybrid._compat import keras as keras_compat


def between_cycles(optimizer) -> bool:
    """Whether `optimizer` holds no accumulated gradients now: it does not
    accumulate, or its last step applied what it had."""
    inner = optimizer
    while True:
        if isinstance(inner, keras.optimizers.LossScaleOptimizer):
            inner = inner.inner_optimizer
        elif getattr(inner, "gradient_accumulation_steps", None):
            break
        elif isinstance(
            getattr(inner, "inner_optimizer", None), keras.optimizers.Optimizer
        ):
            inner = inner.inner_optimizer  # a `HybridOptimizer`
        else:
            return True
    steps = int(inner.gradient_accumulation_steps)
    iterations = keras_compat.iterations_variable(inner)
    return int(iterations.numpy()) % steps == 0
