"""One writer per path: Keras' own saving runs on every rank, only the chief
writes where the user asked.

Every rank must take part in `model.save`, `save_weights` and `export`
(reading a partitioned table is a collective), and stock callbacks
(`ModelCheckpoint`, `BackupAndRestore`, `CSVLogger`) run on every rank. So,
while a `HybridStrategy` with more than one worker exists, this module
redirects the other ranks' writes, like Keras 2 did for
`MultiWorkerMirroredStrategy`:

- `saving_api.save_model` / `save_weights` on other ranks write to a
  private scratch directory, removed right after; every rank then waits
  for all (a barrier that also carries failures), so the file is complete
  when `save` returns anywhere. The chief writes a `.keras` or `.h5` file
  under a hidden name beside it and renames it once all succeeded: a
  worker killed in the save never leaves a file cut short at the path.
  A model with dynamic tables is saved as its stock-Keras equivalent
  (`layers.to_static`, over every worker's live keys), since no worker
  holds all of a dynamic table's keys.
- `model.export` (SavedModel for serving) gathers the weights on every
  rank; the chief exports a single-device copy of the model built outside
  the strategy, so the SavedModel holds whole tables and no collectives
  (of the stock-Keras equivalent for a model with dynamic tables).
- `TensorBoard` writes through no-op summary writers on other ranks
  (`chief_summaries`);
- the stock callbacks that write files themselves (`BackupAndRestore`'s
  epoch record, `ModelCheckpoint`'s folders, `CSVLogger`, `TensorBoard`'s
  projector config) see a
  `file_utils` whose `File` in a write mode, `copy`, `remove`, `rmtree`
  and `makedirs` touch only a scratch directory or do nothing on other
  ranks. Reads pass through, and Keras' saving code keeps the real
  `file_utils` (its temporary folders are its own).

The replaced functions and `file_utils` are `_compat.keras` patch sites
(`save_model`, `save_weights`, `export_saved_model` and four callback
modules' `file_utils`, all looked up by Keras at call time); tables are
written to `.h5` files by `h5_streaming`, TensorBoard's summaries kept to
the chief by `chief_summaries`.
"""

import atexit
import contextlib
import os
import shutil
import tempfile
import threading

import tensorflow as tf
from absl import logging

from keras_hybrid.checkpoint.participants import World
from keras_hybrid.comm import call_fence
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet

_lock = threading.Lock()
_serving = {"strategy": None}


def _follow(strategy) -> None:
    _serving["strategy"] = strategy


def _strategy():
    """The multi-worker strategy served, or None (then nothing changes)."""
    strategy = _serving["strategy"]
    if strategy is None or strategy.size == 1:
        return None
    return strategy


def _redirect() -> bool:
    strategy = _strategy()
    return strategy is not None and not strategy.is_chief


_scratch_root = {"path": None}


def _new_scratch() -> str:
    """A new folder under this process's scratch root.

    The root is removed when the process exits, so files a rank never
    closes (a `CSVLogger` of a worker that an elastic shrink retires with
    `SystemExit`, or `fit` ended by an error) do not stay in the temporary
    directory. Only a killed process leaves its root behind.
    """
    with _lock:
        root = _scratch_root["path"]
        if root is None or not os.path.isdir(root):
            root = tempfile.mkdtemp(
                prefix=f"keras_hybrid_scratch_{os.getpid()}_"
            )
            _scratch_root["path"] = root
            atexit.register(shutil.rmtree, root, True)
    return tempfile.mkdtemp(dir=root)


@contextlib.contextmanager
def _scratch_dir():
    path = _new_scratch()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _all_ranks_write(filepath, write, whole: bool = False) -> object:
    """Runs `write(path)` with the user's path on the chief and a scratch
    path elsewhere, then waits for every rank; a failure anywhere fails
    every rank. With `whole` (a file: `.keras`, `.h5`), the chief writes
    a hidden sibling and renames it once every rank succeeded, so that
    the path never holds a file cut short (a worker killed in the save);
    every rank returns after the rename, so any of them can load the
    file next."""
    strategy = _strategy()
    if strategy is None:
        return write(filepath)
    result, error = None, None
    renamed = whole and _is_local_file(filepath)
    what = f"Saving {str(filepath)!r}"
    with _scratch_dir() as scratch:
        path = filepath
        if not strategy.is_chief:
            path = os.path.join(scratch, os.path.basename(str(filepath)))
        elif renamed:
            path = _sibling(filepath)
        try:
            result = write(path)
        except Exception as e:  # re-raised by `agree`, on every rank
            error = e
        world = World(strategy.rank, strategy.size, strategy.communicator)
        try:
            world.agree(error, what)
            if renamed:
                if strategy.is_chief:
                    try:
                        os.replace(path, filepath)
                    except OSError as e:
                        error = e
                world.agree(error, what)
        finally:
            if path != filepath and strategy.is_chief:
                with contextlib.suppress(OSError):
                    os.remove(path)
    return result


def _is_local_file(filepath) -> bool:
    name = str(filepath)
    return "://" not in name and name.endswith((".keras", ".h5"))


def _sibling(filepath) -> str:
    """A hidden name beside `filepath` that keeps its suffix (Keras
    checks it)."""
    folder, name = os.path.split(str(filepath))
    return os.path.join(folder, f".keras_hybrid_{os.getpid()}_{name}")


def _stock_model(model):
    """`model`, or on several workers, when it has dynamic tables, its
    stock-Keras equivalent (`to_static`) over every worker's live keys:
    each worker holds only its own keys, and the file must hold them all.
    Every rank makes it (an all-gather per table).

    Raises:
        RuntimeError: Inside `strategy.scope()` (the copy's tables would
            be made under the strategy).
    """
    from keras_hybrid.dynamic.dynamic_table import tables_of
    from keras_hybrid.layers.static_copy import to_static

    if _strategy() is None or not tables_of(model.weights):
        return model
    if tf.distribute.has_strategy():
        raise RuntimeError(
            "A model with dynamic tables on several workers is saved as "
            "its stock-Keras equivalent, which must be made outside "
            "`strategy.scope()`. Received: `model.save` inside the scope. "
            "Call it after the `with strategy.scope():` block."
        )
    logging.info(
        "keras-hybrid: saving %s as its stock-Keras equivalent "
        "(`to_static`): its dynamic tables become lookups over every "
        "worker's live keys.",
        model.name,
    )
    return to_static(model)


def _save_model_of(original):
    @call_fence.fences("model.save")
    def save_model(model, filepath, *args, **kwargs):
        model = _stock_model(model)
        return _all_ranks_write(
            filepath,
            lambda path: original(model, path, *args, **kwargs),
            whole=True,
        )

    return save_model


def _save_weights_of(original):
    @call_fence.fences("model.save_weights")
    def save_weights(model, filepath, *args, **kwargs):
        return _all_ranks_write(
            filepath,
            lambda path: original(model, path, *args, **kwargs),
            whole=True,
        )

    return save_weights


def _export_of(original):
    @call_fence.fences("model.export")
    def export_saved_model(model, filepath, *args, **kwargs):
        strategy = _serving["strategy"]
        if strategy is None:
            return original(model, filepath, *args, **kwargs)
        from keras_hybrid.checkpoint import single_device

        model = _stock_model(model)
        # Every rank gathers the weights (a collective); only the chief
        # builds the copy it exports.
        copy = single_device.copy_model(model, build_copy=strategy.is_chief)

        def write(path):
            if strategy.is_chief:
                return original(copy, path, *args, **kwargs)
            logging.info("keras-hybrid: the chief exports %s.", filepath)
            return None

        return _all_ranks_write(filepath, write)

    return export_saved_model


# -- file_utils of the callbacks


class _ChiefFileUtils:
    """Keras' `file_utils` module, with writes kept to the chief."""

    def __init__(self, file_utils) -> None:
        self._real = file_utils

    def __getattr__(self, name):
        return getattr(self._real, name)

    def File(self, path, mode="r"):  # noqa: N802  (Keras' name)
        if not (_redirect() and any(c in mode for c in "wax+")):
            return self._real.File(path, mode)
        logging.log_first_n(
            logging.INFO, "keras-hybrid: only the chief writes %s.", 5, path
        )
        scratch = _new_scratch()
        name = os.path.join(scratch, os.path.basename(str(path)))
        return _RemovedOnClose(self._real.File(name, mode), scratch)

    def copy(self, src, dst):
        return dst if _redirect() else self._real.copy(src, dst)

    def remove(self, path):
        return None if _redirect() else self._real.remove(path)

    def rmtree(self, path):
        return None if _redirect() else self._real.rmtree(path)

    def makedirs(self, path):
        if _redirect():
            return None
        if self._real.is_remote_path(path):
            return self._real.makedirs(path)
        # Every rank checks `exists` before creating the same folder.
        return os.makedirs(path, exist_ok=True)


class _RemovedOnClose:
    """A scratch file object that deletes its directory when closed."""

    def __init__(self, file, scratch: str) -> None:
        self._file = file
        self._scratch = scratch

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __iter__(self):
        return iter(self._file)

    def close(self) -> None:
        self._file.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_FILE_UTILS = (
    "backup_and_restore.file_utils",
    "model_checkpoint.file_utils",
    "csv_logger.file_utils",
    "tensorboard.file_utils",
)
PATCHES = PatchSet(
    "chief_writes",
    (
        Patch(PRIVATE_KERAS, "save_model", _save_model_of),
        Patch(PRIVATE_KERAS, "save_weights", _save_weights_of),
        Patch(PRIVATE_KERAS, "export_saved_model", _export_of),
        *(Patch(PRIVATE_KERAS, site, _ChiefFileUtils) for site in _FILE_UTILS),
    ),
    follow=_follow,
)
