"""Refuses, as `fit` starts on several workers, the stock callbacks that
would save a model with dynamic tables as Keras weights files.

Each worker holds only its own keys' rows, so `DynamicEmbedding` refuses
`save_weights` and `load_weights` there; `BackupAndRestore` and a
`ModelCheckpoint` with `save_weights_only=True` would hit that refusal at
the first save, after an epoch of training. `ShardedCheckpoint` resumes
such a model, and a `ModelCheckpoint` of `.keras` files writes its
stock-Keras equivalent.
"""

import keras

from keras_hybrid.dynamic.dynamic_table import tables_of


def check(model: keras.Model, callbacks, workers: int) -> None:
    """Raises if `callbacks` (a list, a `keras.callbacks.CallbackList` or
    None) would save `model`'s dynamic tables as Keras weights on
    `workers` workers.

    Raises:
        NotImplementedError: Naming the callback and what to use instead.
    """
    callbacks = getattr(callbacks, "callbacks", callbacks)
    if workers < 2 or not callbacks:
        return
    tables = tables_of(model.weights)
    if not tables:
        return
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.BackupAndRestore) or (
            isinstance(callback, keras.callbacks.ModelCheckpoint)
            and callback.save_weights_only
        ):
            raise NotImplementedError(
                f"`{type(callback).__name__}` saves Keras weights files, "
                f"which cannot hold the dynamic tables {tables[0].name!r}"
                f"{' and others' if len(tables) > 1 else ''} on several "
                "workers: each worker holds only its own keys' rows. "
                f"Received: {type(callback).__name__} in `fit`'s callbacks "
                f"on {workers} workers. Resume with "
                "`keras_hybrid.callbacks.ShardedCheckpoint`, or keep "
                "`.keras` files with `ModelCheckpoint` (without "
                "`save_weights_only`), which hold the stock-Keras "
                "equivalent."
            )
