"""Keras changes in force while an elastic `HybridStrategy` is open.

- Losses are scaled by each worker's share of the global batch
  (`patches/loss_scaling.py`, `strategy/batch_share.py`), read when the
  step runs, so the traced step stays right after a resize.
- `keras.Model.fit` gets an `ElasticResize` and an `ElasticCommit`
  callback (the user's script stays unchanged) and checks, before
  training, that every global batch has at least as many rows as the
  job can have workers. When a lost worker stops `fit`, the survivors recover
  (`ElasticRecovery`) and `fit` runs again from the last commit; the call
  returns the `History` of that last run.
"""

import functools
import inspect
import math

import keras
import tensorflow as tf

from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet

_KERAS_DEFAULT_BATCH = 32


def membership_of(strategy):
    """The `ElasticMembership` of a `HybridStrategy`, else None (told by
    its extended's communicator, without importing the strategy)."""
    extended = getattr(strategy, "extended", None)
    communicator = getattr(extended, "communicator", None)
    return getattr(communicator, "membership", None)


def _elastic_fit(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        membership = membership_of(self.distribute_strategy)
        if membership is None:
            return original(self, *args, **kwargs)
        from keras_hybrid.elastic.commit import ElasticCommit
        from keras_hybrid.elastic.recovery import ElasticRecovery

        bound = signature.bind(self, *args, **kwargs)
        check_global_batch(
            bound.arguments.get("x"),
            bound.arguments.get("batch_size"),
            membership.min_np,
            membership.max_np,
            bound.arguments.get("validation_split") or 0.0,
        )
        strategy = self.distribute_strategy
        user_callbacks = list(bound.arguments.get("callbacks") or [])
        commit = ElasticCommit(strategy, membership.commit_interval)
        recovery = ElasticRecovery(strategy, self, commit).start()
        resume = None
        try:
            while True:
                bound.arguments["callbacks"], resize = _callbacks(
                    strategy,
                    membership,
                    user_callbacks,
                    commit,
                    recovery,
                    resume,
                )
                if resume is not None:
                    bound.arguments["initial_epoch"] = resume["epoch"]
                try:
                    return original(*bound.args, **bound.kwargs)
                except Exception as error:  # noqa: BLE001 - recover() re-raises
                    resize.cut_short()
                    resume = _recover(recovery, error)
        finally:
            recovery.stop()

    return fit


def _recover(recovery, error):
    """Recovers after `error`; again if a recovery fails on a newer plan
    (one more worker lost meanwhile). Returns the commit to resume from."""
    while True:
        try:
            return recovery.recover(error)
        except Exception as again:  # noqa: BLE001 - recover() re-raises
            if again is error:
                raise
            error = again


def _callbacks(strategy, membership, user, commit, recovery, resume) -> tuple:
    """`fit`'s callbacks: the user's, then `ElasticResize` and
    `ElasticCommit`, gated while a joiner or a resumed run skips batches
    (a resumed run does not begin the user's again); and the
    `ElasticResize`."""
    from keras_hybrid.elastic.gated_callback import GatedCallback
    from keras_hybrid.elastic.replay import replay_callback
    from keras_hybrid.elastic.resize import ElasticResize

    resize = ElasticResize(strategy)
    if resume is not None:
        # First, so that it opens the gate before the others see a batch.
        replay = replay_callback(
            recovery, strategy, resume["batch"], [resize, commit]
        )
        return [
            replay,
            *(GatedCallback(c, replay.trains, begins=False) for c in user),
            *(GatedCallback(c, replay.trains) for c in (resize, commit)),
        ], resize
    if membership.joining:
        gated = [GatedCallback(c, resize.trains) for c in user]
        return [*gated, resize, GatedCallback(commit, resize.trains)], resize
    return [*user, resize, commit], resize


def check_global_batch(
    x, batch_size, min_np: int, max_np: int, validation_split: float = 0.0
) -> None:
    """Raises `ValueError` if a global batch of `fit` has fewer rows than
    the job can have workers (a worker would get none).

    Any larger batch is exact: each worker's loss counts by its share of
    the global batch (`strategy/batch_share.py`). Only training batches
    count: `validation_split` keeps its last rows out (as Keras splits
    arrays), and validation's metrics are sums over workers.
    """
    del min_np
    for rows in _global_batches(x, batch_size, validation_split):
        if rows < max_np:
            raise ValueError(
                "Under elastic training every global batch needs at least "
                f"one row per worker, up to --max-np {max_np}. Received: a "
                f"global batch of {rows} rows. Use a batch size of at least "
                f"{max_np}, drop the last partial batch (trim the arrays to "
                "a multiple of the batch size, or batch a tf.data dataset "
                "with drop_remainder=True), or lower --max-np."
            )


def _global_batches(x, batch_size, validation_split=0.0) -> list[int]:
    """Global batch sizes `fit` will train on: the full one and a last
    partial one; empty if they are unknown (a generator)."""
    if isinstance(x, tf.data.Dataset):
        first = next(iter(x.take(1)), None)
        if first is None:
            return []
        leaf = tf.nest.flatten(first)[0]
        return [int(tf.shape(leaf)[0])]
    leaves = [t for t in tf.nest.flatten(x) if hasattr(t, "shape")]
    if not leaves or not leaves[0].shape:
        return []
    samples = int(leaves[0].shape[0])
    if validation_split:
        # Keras' `train_validation_split`: the first rows train.
        samples = int(math.floor(samples * (1.0 - validation_split)))
    batch = batch_size or _KERAS_DEFAULT_BATCH
    sizes = [min(batch, samples)]
    if samples > batch and samples % batch:
        sizes.append(samples % batch)
    return sizes


PATCHES = PatchSet(
    "elastic_training",
    (Patch(keras.Model, "fit", _elastic_fit),),
    elastic=True,
)
