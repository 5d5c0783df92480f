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
both its merge-call and its no-merge-call paths. `install` is idempotent;
`uninstall` restores it.
"""

import threading

import keras
import tensorflow as tf

from keras_hybrid.strategy.hybrid_extended import HybridExtended

_lock = threading.Lock()
_originals: dict = {}


def install() -> None:
    """Makes `LossScaleOptimizer.check_finite` agree across workers."""
    with _lock:
        if _originals:
            return
        cls = keras.optimizers.LossScaleOptimizer
        _originals["check_finite"] = cls.check_finite
        cls.check_finite = _check_finite


def uninstall() -> None:
    """Restores Keras' `check_finite` (for tests)."""
    with _lock:
        original = _originals.pop("check_finite", None)
        if original is not None:
            keras.optimizers.LossScaleOptimizer.check_finite = original


def all_workers_finite(finite: tf.Tensor, communicator) -> tf.Tensor:
    """True on every worker iff `finite` is true on every worker.

    A collective: every worker must call it at the same point.
    """
    if communicator.size == 1:
        return finite
    not_finite = tf.cast(tf.logical_not(finite), tf.float32)
    (count,) = communicator.all_reduce([not_finite], op="sum", path="control")
    return tf.equal(count, 0.0)


def _check_finite(optimizer, grads):
    finite = _originals["check_finite"](optimizer, grads)
    extended = tf.distribute.get_strategy().extended
    if not isinstance(extended, HybridExtended):
        return finite
    return all_workers_finite(finite, extended.communicator)
