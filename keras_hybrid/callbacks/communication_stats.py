"""`CommunicationStats`: bytes per traffic path and step time in `logs`."""

import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_hybrid.callbacks.communication_table import _COLUMNS
from keras_hybrid.callbacks.communication_table import format_resizes
from keras_hybrid.callbacks.communication_table import format_table
from keras_hybrid.callbacks.communication_table import logs_from
from keras_hybrid.callbacks.dynamic_table_stats import DynamicTableStats
from keras_hybrid.comm.comm_stats import PATHS


class CommunicationStats(keras.callbacks.Callback):
    """Puts traffic per step and path, load balance and step time in `logs`.

    At the end of every epoch (and every `every_n_steps` train steps if
    set) it adds to `logs`, as means over workers of per-step values since
    the last report:

    - `comm_<path>_sent_bytes` and `comm_<path>_received_bytes` for each
      path of `keras_hybrid.comm.PATHS` (`dense` all-reduce, `sparse_pull`,
      `sparse_push`, `ids`, `padding`, `control`), and
      `comm_total_sent_bytes`;
    - `comm_padding_share`: padding bytes / all bytes sent;
    - `comm_shard_imbalance`: max / mean over workers of the table rows
      each worker's shards served (`0` if no partitioned table was read);
    - `comm_step_time_ms`: mean wall time of a train step;
    - at the end of every epoch, for a model with `DynamicEmbedding`
      layers, each table's `<table>_rows`, `<table>_admissions` (rows
      inserted), `<table>_evictions`, `<table>_expirations` and
      `<table>_rejections`, as `DynamicTableStats` adds them (summed over
      workers, and per worker as `<table>_<figure>_worker<rank>`).

    Every worker gets the same values, so `keras.callbacks.CSVLogger` and
    `keras.callbacks.TensorBoard` record them unchanged: put this callback
    before them in the list. At the end of training the chief logs a table
    with one row per worker (whole run, per step) and, in an elastic job,
    one row per resize (global step, reason, old and new size, bytes moved,
    stall); `summary["resizes"]` holds the same records.

    Bytes are what the communicator counts (see `CommStats`): a ring
    all-reduce of D bytes sends and receives 2 (N - 1) / N D per worker.
    A report is one small all-gather of the counters (and one per dynamic
    table), which every worker runs at the same step; its own bytes are
    not counted in the report.

    Args:
        every_n_steps: Optional int. Also report every this many train
            steps (batch-level `logs`, which `TensorBoard(update_freq=...)`
            sees). Defaults to `None`: once per epoch.
        log_table_on_chief: Boolean. Whether rank 0 logs the summary table
            at the end of training. Defaults to `True`.

    Example:

    ```python
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="mse")
    model.fit(
        dataset,
        epochs=3,
        callbacks=[
            keras_hybrid.callbacks.CommunicationStats(),
            keras.callbacks.CSVLogger("train.csv"),
        ],
    )
    ```

    Raises:
        ValueError: If `every_n_steps` is not a positive int, or (at the
            start of training) the model was not built under a
            `HybridStrategy` scope.
    """

    def __init__(
        self, every_n_steps: int | None = None, log_table_on_chief: bool = True
    ) -> None:
        super().__init__()
        if every_n_steps is not None and (
            isinstance(every_n_steps, bool)
            or not isinstance(every_n_steps, int)
            or every_n_steps < 1
        ):
            raise ValueError(
                "`every_n_steps` must be None or an int >= 1. Received: "
                f"every_n_steps={every_n_steps!r}"
            )
        self.every_n_steps = every_n_steps
        self.log_table_on_chief = log_table_on_chief
        self.summary: dict | None = None
        self._tables = DynamicTableStats()

    # -- Keras hooks

    def on_train_begin(self, logs=None):
        strategy = self.model.distribute_strategy
        comm = getattr(strategy, "communicator", None)
        if comm is None:
            raise ValueError(
                "`CommunicationStats` needs a model created under "
                "`keras_hybrid.HybridStrategy().scope()`. Received a model "
                f"with strategy {type(strategy).__name__}."
            )
        self._comm = comm
        # Bytes of this callback's own gathers, left out of every report.
        self._own = np.zeros(2 * len(PATHS))
        self._tables.set_model(self.model)
        self._marks = {
            "run": self._mark(),
            "epoch": self._mark(),
            "interval": self._mark(),
        }

    def on_epoch_begin(self, epoch, logs=None):
        self._not_counted(self._tables.on_epoch_begin, epoch, logs)
        self._marks["epoch"] = self._mark()
        self._marks["interval"] = self._mark()

    def on_train_batch_end(self, batch, logs=None):
        for mark in self._marks.values():
            mark["steps"] += 1
        # By the batch index, the same on every rank (a worker that joined
        # an elastic job mid-epoch counted fewer steps).
        if self.every_n_steps is not None and (
            (batch + 1) % self.every_n_steps == 0
        ):
            self._report("interval", logs)

    def on_epoch_end(self, epoch, logs=None):
        self._report("epoch", logs)
        self._not_counted(self._tables.on_epoch_end, epoch, logs)

    def on_train_end(self, logs=None):
        per_rank = self._gather(self._per_step(self._marks["run"]))
        resizes = list(self._comm.stats.resizes)
        self.summary = {
            "per_rank": per_rank,
            "columns": list(_COLUMNS),
            "resizes": resizes,
        }
        if self.log_table_on_chief and self._comm.rank == 0:
            logging.info(
                "Communication per train step (bytes):\n%s",
                format_table(per_rank),
            )
            if resizes:
                logging.info("Elastic resizes:\n%s", format_resizes(resizes))

    # -- helpers

    def _bytes(self) -> np.ndarray:
        """Bytes sent, then received, per path, so far."""
        snap = self._comm.stats.snapshot()
        sent = [snap[p]["bytes"] for p in PATHS]
        return np.asarray(sent + [snap[p]["received_bytes"] for p in PATHS])

    def _mark(self) -> dict:
        return {
            "bytes": self._bytes() - self._own,
            "rows": self._comm.stats.rows_served(),
            "time": time.perf_counter(),
            "steps": 0,
        }

    def _per_step(self, since: dict) -> np.ndarray:
        """This rank's `_COLUMNS` per step since the mark `since`."""
        steps = max(since["steps"], 1)
        moved = self._bytes() - self._own - since["bytes"]
        rows = self._comm.stats.rows_served() - since["rows"]
        seconds = time.perf_counter() - since["time"]
        values = np.concatenate([moved, [rows, 1e3 * seconds]])
        return values.astype(np.float64) / steps

    def _gather(self, mine: np.ndarray) -> np.ndarray:
        """`[workers, len(_COLUMNS)]`: every rank's vector, in rank order."""
        return self._not_counted(
            lambda: self._comm.all_gather(tf.constant(mine[None, :]))[0]
        ).numpy()

    def _not_counted(self, call, *args):
        """`call(*args)`, whose bytes are left out of every report."""
        before = self._bytes()
        result = call(*args)
        self._own = self._own + self._bytes() - before
        return result

    def _report(self, which: str, logs) -> None:
        # A collective on every rank, whatever its own steps: a worker that
        # joined an elastic job at an epoch's end trained none of it.
        per_rank = self._gather(self._per_step(self._marks[which]))
        if logs is not None:
            logs.update(logs_from(per_rank))
        if which == "interval":
            self._marks["interval"] = self._mark()
