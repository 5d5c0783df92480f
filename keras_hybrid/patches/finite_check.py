"""One finite-gradient verdict for all workers under dynamic loss scaling.

Keras' `LossScaleOptimizer` skips a step, and halves its loss scale, when
`check_finite(grads)` finds an inf or a NaN. It checks the gradients it is
given, before the strategy reduces them (Keras 3 all-reduces inside the
inner optimizer's update), so under `HybridStrategy` each worker would judge
its own gradients: its local dense gradients, and the pushed gradients of
the table rows it owns. A worker that sees an inf the others do not would
skip the all-reduces the others run, and the ranks would diverge and hang.

While a multi-worker `HybridStrategy` exists, `check_finite` is replaced by
one that also sums, over workers, a flag "my gradients are not finite" (one
scalar all-reduce on the `control` path, every step on every worker, so it
always pairs with itself). Every worker then takes the same branch, and the
step is skipped exactly when one process on the global batch would skip it
(the sum of finite per-worker gradients is finite unless a float32 sum
overflows). Outside a multi-worker `HybridStrategy` the check is Keras'.

Private hook touched (Keras 3.15 / TF 2.21): the method
`LossScaleOptimizer.check_finite`, called by `LossScaleOptimizer.apply` on
both its merge-call and its no-merge-call paths.
"""

import keras
import tensorflow as tf

from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy.hybrid_extended import HybridExtended


def all_workers_finite(finite: tf.Tensor, communicator) -> tf.Tensor:
    """True on every worker iff `finite` is true on every worker.

    A collective: every worker must call it at the same point.
    """
    if communicator.size == 1:
        return finite
    not_finite = tf.cast(tf.logical_not(finite), tf.float32)
    (count,) = communicator.all_reduce([not_finite], op="sum", path="control")
    return tf.equal(count, 0.0)


def _check_finite_of(original):
    def check_finite(optimizer, grads):
        finite = original(optimizer, grads)
        extended = tf.distribute.get_strategy().extended
        if not isinstance(extended, HybridExtended):
            return finite
        return all_workers_finite(finite, extended.communicator)

    return check_finite


PATCHES = PatchSet(
    "finite_check",
    (
        Patch(
            keras.optimizers.LossScaleOptimizer,
            "check_finite",
            _check_finite_of,
        ),
    ),
)
