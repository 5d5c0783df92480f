"""`ShardedCheckpoint`: periodic sharded checkpoints, resumed automatically."""

import keras

from keras_hybrid import checkpoint
from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.checkpoint.save import DEFAULT_KEEP


class ShardedCheckpoint(keras.callbacks.Callback):
    """Saves sharded checkpoints during `fit` and resumes from the newest.

    The `BackupAndRestore` of partitioned tables: every worker writes the
    rows it owns, in parallel, so no process ever holds a whole table, and
    a later run on any number of workers resumes from the newest complete
    checkpoint (weights, optimizer state and epoch). Dynamic tables are
    saved by key (rows, optimizer slots, admission counts) and restored
    onto the keys' owners on the new worker count. Use it for tables too
    big for one host, or when the worker count changes between runs. For
    models that fit in one host, stock `keras.callbacks.BackupAndRestore`
    and `ModelCheckpoint` also work under `HybridStrategy`.

    Args:
        directory: String. Folder of checkpoints, shared by all workers.
        save_freq: `"epoch"` or an int: save at the end of each epoch, or
            every `save_freq` batches. Defaults to `"epoch"`.
        keep: Int. Checkpoints kept; older ones are deleted once a newer
            one is complete. Defaults to `2`.
        restore: Boolean. Whether to restore the newest checkpoint, if any,
            when training begins. Defaults to `True`.

    Example:

    ```python
    model.fit(ds, epochs=10, callbacks=[
        keras_hybrid.callbacks.ShardedCheckpoint("/shared/run1/ckpt")])
    ```
    """

    def __init__(
        self,
        directory: str,
        save_freq="epoch",
        keep: int = DEFAULT_KEEP,
        restore: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(directory, str) or not directory:
            raise ValueError(
                "`directory` must be a non-empty string. Received: "
                f"directory={directory!r}"
            )
        if save_freq != "epoch" and (
            isinstance(save_freq, bool)
            or not isinstance(save_freq, int)
            or save_freq < 1
        ):
            raise ValueError(
                "`save_freq` must be 'epoch' or a positive int. Received: "
                f"save_freq={save_freq!r}"
            )
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(
                f"`keep` must be an int >= 1. Received: keep={keep!r}"
            )
        self.directory = directory
        self.save_freq = save_freq
        self.keep = keep
        self.restore = restore
        self._epoch = 0
        self._batches = 0

    def on_train_begin(self, logs=None):
        if not self.restore:
            return
        if checkpoint.latest_checkpoint(self.directory) is None:
            return
        manifest = checkpoint.restore_checkpoint(self.model, self.directory)
        if manifest.get("epoch") is not None:
            # What `BackupAndRestore` sets: `fit` starts from this epoch.
            keras_compat.set_initial_epoch(self.model, manifest["epoch"])

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._batches += 1
        if self._batches >= self.save_freq:
            self._batches = 0
            self._save(self._epoch)

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch":
            self._save(epoch + 1)

    def _save(self, epoch: int) -> None:
        checkpoint.save_checkpoint(
            self.model, self.directory, epoch=epoch, keep=self.keep
        )
