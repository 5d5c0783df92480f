"""A loss averaged over its mask or its sample weights divides by the
global batch's count, not each worker's.

Keras' loss objects average over the valid entries of a mask (a padded
sequence under `mask_zero`, `ignore_class` of the cross-entropies) and,
with `reduction="mean_with_sample_weight"`, over the sum of the sample
weights. On several workers each divides by its own slice's count, and
`scale_loss_for_distribution` then weighs the workers by rows
(`patches/loss_scaling.py`): the sum over workers is the mean over the
global batch only when every worker's slice has the same share of valid
entries as of rows, which padding rarely gives. A translation model
trained with `ignore_class=0` drifted from one process by 1e-5 to 1e-3 of
its weights in 16 steps.

While a multi-worker step runs, Keras' `reduce_weighted_values` is
followed by one scalar all-reduce of the count it divided by
(`_compat.keras.loss_divisor`, `path="control"`), and its result is
corrected from `share * sum / local_count` to `sum / global_count`: the
workers' losses and gradients then add up to one process's. Losses that
divide by the number of elements, or do not divide, are left as they are.

Private hook touched: `reduce_weighted_values` of Keras' loss module,
reached only as the `_compat.keras` patch site of that name.
"""

import functools

import tensorflow as tf

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy import batch_share
from keras_hybrid.strategy import hybrid_extended


def _global_count_of(reduce_weighted_values):
    @functools.wraps(reduce_weighted_values)
    def reduced(
        values,
        sample_weight=None,
        mask=None,
        reduction="sum_over_batch_size",
        dtype=None,
    ):
        loss = reduce_weighted_values(
            values, sample_weight, mask, reduction, dtype
        )
        strategy = hybrid_extended.multi_worker_step_strategy()
        if strategy is None:
            return loss
        local = keras_compat.loss_divisor(
            values, sample_weight, mask, reduction, dtype
        )
        if local is None:
            return loss
        communicator = strategy.extended.communicator
        local = tf.cast(local, tf.float32)
        (total,) = communicator.all_reduce([local], path="control")
        share = tf.cast(batch_share.factor(communicator), tf.float64)
        correction = tf.math.divide_no_nan(
            tf.cast(local, tf.float64), share * tf.cast(total, tf.float64)
        )
        # Keras' loss scaling marked `loss`; the corrected one stands in.
        return batch_share.mark_scaled(loss * tf.cast(correction, loss.dtype))

    return reduced


PATCHES = PatchSet(
    "loss_means",
    (Patch(PRIVATE_KERAS, "reduce_weighted_values", _global_count_of),),
)
