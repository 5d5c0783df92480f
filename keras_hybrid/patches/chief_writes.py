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
  when `save` returns anywhere.
- `model.export` (SavedModel for serving) gathers the weights on every
  rank; the chief exports a single-device copy of the model built outside
  the strategy, so the SavedModel holds whole tables and no collectives.
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
written to `.h5` files by `h5_streaming`. `install` is idempotent;
`uninstall` restores them.
"""

import atexit
import contextlib
import os
import shutil
import tempfile
import threading

from absl import logging

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.checkpoint.participants import World
from keras_hybrid.comm import call_fence
from keras_hybrid.patches import chief_summaries
from keras_hybrid.patches import h5_streaming

_lock = threading.Lock()
_originals: dict = {}
_active = {"strategy": None}


def install(strategy) -> None:
    """Routes Keras' file writes through `strategy`'s rank (idempotent)."""
    with _lock:
        _active["strategy"] = strategy
        if _originals:
            return
        proxy = _ChiefFileUtils(
            keras_compat.current("backup_and_restore.file_utils")
        )
        patches = {
            "save_model": _save_model,
            "save_weights": _save_weights,
            "export_saved_model": _export_saved_model,
            "backup_and_restore.file_utils": proxy,
            "model_checkpoint.file_utils": proxy,
            "csv_logger.file_utils": proxy,
            "tensorboard.file_utils": proxy,
        }
        for site, replacement in patches.items():
            _originals[site] = keras_compat.replace(site, replacement)
        h5_streaming.install(lambda: _active["strategy"].is_chief)
        chief_summaries.install(_redirect)


def uninstall() -> None:
    """Restores Keras' functions (for tests and `strategy` teardown)."""
    with _lock:
        for site, original in _originals.items():
            keras_compat.replace(site, original)
        _originals.clear()
        h5_streaming.uninstall()
        chief_summaries.uninstall()
        _active["strategy"] = None


def _original(name: str):
    return _originals[name]


def _strategy():
    """The active multi-worker strategy, or None (then nothing changes)."""
    strategy = _active["strategy"]
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


def _all_ranks_write(filepath, write) -> object:
    """Runs `write(path)` with the user's path on the chief and a scratch
    path elsewhere, then waits for every rank; a failure anywhere fails
    every rank."""
    strategy = _strategy()
    if strategy is None:
        return write(filepath)
    result, error = None, None
    with _scratch_dir() as scratch:
        path = filepath
        if not strategy.is_chief:
            path = os.path.join(scratch, os.path.basename(str(filepath)))
        try:
            result = write(path)
        except Exception as e:  # re-raised by `agree`, on every rank
            error = e
        world = World(strategy.rank, strategy.size, strategy.communicator)
        world.agree(error, f"Saving {str(filepath)!r}")
    return result


@call_fence.fences("model.save")
def _save_model(model, filepath, *args, **kwargs):
    original = _original("save_model")
    return _all_ranks_write(
        filepath, lambda path: original(model, path, *args, **kwargs)
    )


@call_fence.fences("model.save_weights")
def _save_weights(model, filepath, *args, **kwargs):
    original = _original("save_weights")
    return _all_ranks_write(
        filepath, lambda path: original(model, path, *args, **kwargs)
    )


@call_fence.fences("model.export")
def _export_saved_model(model, filepath, *args, **kwargs):
    original = _original("export_saved_model")
    strategy = _active["strategy"]
    if strategy is None:
        return original(model, filepath, *args, **kwargs)
    from keras_hybrid.checkpoint import single_device

    # Every rank gathers the weights (a collective); only the chief builds
    # the copy it exports.
    copy = single_device.copy_model(model, build_copy=strategy.is_chief)

    def write(path):
        if strategy.is_chief:
            return original(copy, path, *args, **kwargs)
        logging.info("keras-hybrid: the chief exports %s.", filepath)
        return None

    return _all_ranks_write(filepath, write)


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
