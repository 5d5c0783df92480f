"""Stock `keras.callbacks.TensorBoard` writes on the chief only.

The callback runs on every rank (its `set_model` and epoch hooks are the
same everywhere), but on other ranks its summary writers are TensorFlow's
no-op writer, so no event file is created and every `tf.summary` call in
its hooks writes nothing; its profiler does not start there. The chief's
writers are untouched. `chief_writes` installs this and also keeps the
callback's projector config (`file_utils`) to the chief.

Replaced through `_compat.keras` patch sites: `TensorBoard.summary` (the
property giving the `tf.summary` module the callback writes through) and
`TensorBoard.start_profiler`. `install` is idempotent; `uninstall`
restores them.
"""

import threading

import tensorflow as tf
from absl import logging

from keras_hybrid._compat import keras as keras_compat

_lock = threading.Lock()
_originals: dict = {}
_redirect = {"fn": None}


def install(redirect) -> None:
    """Silences TensorBoard's writers while `redirect()` is true.

    Args:
        redirect: Callable returning whether this rank must not write.
    """
    with _lock:
        _redirect["fn"] = redirect
        if _originals:
            return
        _originals["summary"] = keras_compat.replace(
            "TensorBoard.summary", property(_summary)
        )
        _originals["start_profiler"] = keras_compat.replace(
            "TensorBoard.start_profiler", _start_profiler
        )


def uninstall() -> None:
    """Restores the callback's writers."""
    with _lock:
        for name, original in _originals.items():
            keras_compat.replace(f"TensorBoard.{name}", original)
        _originals.clear()
        _redirect["fn"] = None


def _silenced() -> bool:
    redirect = _redirect["fn"]
    return redirect is not None and redirect()


def _summary(callback):
    module = _originals["summary"].fget(callback)
    if not _silenced():
        return module
    logging.log_first_n(
        logging.INFO,
        "keras-hybrid: only the chief writes TensorBoard logs to %s.",
        1,
        callback.log_dir,
    )
    return _NoFileSummary(module)


def _start_profiler(callback, logdir):
    if _silenced():
        return None
    return _originals["start_profiler"](callback, logdir)


class _NoFileSummary:
    """`tf.summary` whose `create_file_writer` gives a no-op writer."""

    def __init__(self, module) -> None:
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    def create_file_writer(self, *args, **kwargs):
        del args, kwargs
        return tf.summary.create_noop_writer()
