"""The callback that resumes an elastic `fit` at a commit's batch.

After a recovery (`elastic.recovery`), `fit` restarts from the commit's
epoch; this callback draws, without training, that epoch's batches before
the commit's batch, so that the replayed steps train on the same global
batches, and completes the recovery's record after the first replayed
step.
"""

import keras


class _Replay(keras.callbacks.Callback):
    """Draws, without training, the batches of the resumed epoch before
    the commit's batch; then lets the steps run (the replay). Tells
    `epoch_listeners` (gated otherwise) each epoch's start."""

    def __init__(self, recovery, strategy, batch: int, epoch_listeners):
        super().__init__()
        self._listeners = list(epoch_listeners)
        self._recovery = recovery
        self._strategy = strategy
        self._until = batch
        self._skipping = batch > 0
        self._real = None
        self._first = True

    def trains(self) -> bool:
        return not self._skipping

    def on_train_begin(self, logs=None):
        self._real = self.model.train_function
        if self._skipping:
            self.model.train_function = self._skip

    def on_epoch_begin(self, epoch, logs=None):
        for callback in self._listeners:
            callback.on_epoch_begin(epoch, logs)

    def on_train_batch_begin(self, batch, logs=None):
        if self._skipping and batch >= self._until:
            self._skipping = False
            self.model.train_function = self._real

    def on_train_batch_end(self, batch, logs=None):
        if self._skipping or not self._first:
            return
        self._first = False
        self._recovery.finish(self._strategy.communicator)

    def _skip(self, iterator):
        next(iterator)
        return {}


def replay_callback(recovery, strategy, batch: int, epoch_listeners=()):
    """The callback that resumes a `fit` at `batch` of its first epoch
    (put it first in `fit`'s callbacks)."""
    return _Replay(recovery, strategy, batch, epoch_listeners)
