"""`GatedCallback`: hides the batches a joiner skips from a user callback.

A worker that joins an elastic job mid-run draws the global batches it
missed from its iterator without training on them (`ElasticResize`).
Keras still calls every callback for those batches and epoch ends; a
callback that runs collectives there (`CommunicationStats`, a checkpoint)
would wait for members that ran them long ago. While the gate is shut,
batch and epoch hooks are not passed on; everything else is. In a `fit`
that a recovery runs again, `on_train_begin` is not passed on either.

No private hook is touched here.
"""

import keras

_GATED = (
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
)
_PASSED = (
    "on_train_begin",
    "on_train_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_predict_begin",
    "on_predict_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
)


class GatedCallback(keras.callbacks.Callback):
    """Passes hooks to `callback` except batch and epoch hooks while
    `is_open()` is False, and `on_train_begin` unless `begins`.

    Args:
        callback: A `keras.callbacks.Callback`.
        is_open: Callable returning a boolean.
        begins: Boolean. Whether `on_train_begin` is passed on. False in
            a `fit` that an elastic recovery runs again: for the user's
            callbacks it is the same training (a `BackupAndRestore` or
            `ShardedCheckpoint` would restore an older state over the
            commit's, an `EarlyStopping` lose its patience, a `CSVLogger`
            start its file again). Defaults to `True`.
    """

    def __init__(self, callback, is_open, begins: bool = True) -> None:
        super().__init__()
        self.callback = callback
        self._is_open = is_open
        for name in _GATED:
            setattr(self, name, self._gated(name))
        for name in _PASSED:
            if name != "on_train_begin" or begins:
                setattr(self, name, getattr(callback, name))

    def set_model(self, model) -> None:
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params) -> None:
        super().set_params(params)
        self.callback.set_params(params)

    def _gated(self, name: str):
        hook = getattr(self.callback, name)

        def gated(*args, **kwargs):
            if self._is_open():
                return hook(*args, **kwargs)
            return None

        return gated
