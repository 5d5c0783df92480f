"""Stock `keras.callbacks.TensorBoard` writes on the chief only.

The callback runs on every rank (its `set_model` and epoch hooks are the
same everywhere), but on other ranks its summary writers are TensorFlow's
no-op writer, so no event file is created and every `tf.summary` call in
its hooks writes nothing; its profiler does not start there. The chief's
writers are untouched. `chief_writes` keeps the callback's projector
config (`file_utils`) to the chief.

Patch sites (`_compat.keras`): `TensorBoard.summary` (the property giving
the `tf.summary` module the callback writes through) and
`TensorBoard.start_profiler`.
"""

import tensorflow as tf
from absl import logging

from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet

_serving = {"strategy": None}


def _follow(strategy) -> None:
    _serving["strategy"] = strategy


def _summary_of(original):
    def summary(callback):
        module = original.fget(callback)
        if not _silenced():
            return module
        logging.log_first_n(
            logging.INFO,
            "keras-hybrid: only the chief writes TensorBoard logs to %s.",
            1,
            callback.log_dir,
        )
        return _NoFileSummary(module)

    return property(summary)


def _start_profiler_of(original):
    def start_profiler(callback, logdir):
        if _silenced():
            return None
        return original(callback, logdir)

    return start_profiler


PATCHES = PatchSet(
    "chief_summaries",
    (
        Patch(PRIVATE_KERAS, "TensorBoard.summary", _summary_of),
        Patch(PRIVATE_KERAS, "TensorBoard.start_profiler", _start_profiler_of),
    ),
    follow=_follow,
)


def _silenced() -> bool:
    """Whether this rank must not write: a worker but the chief of a
    multi-worker strategy."""
    strategy = _serving["strategy"]
    return strategy is not None and strategy.size > 1 and not strategy.is_chief


class _NoFileSummary:
    """`tf.summary` whose `create_file_writer` gives a no-op writer."""

    def __init__(self, module) -> None:
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    def create_file_writer(self, *args, **kwargs):
        del args, kwargs
        return tf.summary.create_noop_writer()
