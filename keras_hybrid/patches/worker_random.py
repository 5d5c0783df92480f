"""Random layers draw a different stream on every worker.

Keras 3 layers draw their randomness (`Dropout`, `GaussianNoise`, the
`Random*` augmentation layers, `keras.random.*(seed=None)`) from a
`keras.random.SeedGenerator`, whose state is a variable: the same on every
worker, so every worker drew the same numbers. With a multi-worker
`HybridStrategy`, each worker's slice of a global batch then got the same
dropout masks and augmentations as every other slice: a global batch of B
rows had only B/N distinct masks.

While a multi-worker strategy is open, `SeedGenerator.next` (public
`keras.random.SeedGenerator`) is wrapped: inside a step of that strategy
(its replica context), the seed it returns is folded with the worker's
rank (`tf.random.experimental.stateless_fold_in`) on every rank but 0.
The generators' states advance as before, identically on every worker;
rank 0 keeps the stream one process draws, so its rows of a batch-first
mask are those one process draws for the first rows. Draws outside a
step (initializers, user code) are unchanged. A seed given as a plain
int to `keras.random.*` names one stream and stays the same everywhere.
The rank is read when the step runs, so an elastic job's re-numbered
workers fold their new rank without tracing again.
"""

import keras
import tensorflow as tf

from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.strategy import hybrid_extended


def _next_of(original):
    def next(self, ordered=True):  # noqa: A001 (Keras' name)
        seed = original(self, ordered)
        rank = _step_rank()
        if rank is None:
            return seed
        rank = tf.cast(rank, seed.dtype)
        folded = tf.random.experimental.stateless_fold_in(seed, rank)
        return tf.where(rank > 0, folded, seed)

    return next


PATCHES = PatchSet(
    "worker_random",
    (Patch(keras.random.SeedGenerator, "next", _next_of),),
)


def _step_rank():
    """This worker's rank (a tensor under elastic membership) inside a
    multi-worker `HybridStrategy` step, else None."""
    strategy = hybrid_extended.multi_worker_step_strategy()
    if strategy is None:
        return None
    communicator = strategy.communicator
    membership = getattr(communicator, "membership", None)
    if membership is not None:
        return membership.rank_and_size()[0]
    return communicator.rank
