"""`DynamicTableStats`: per-epoch rows, admissions and evictions of each
dynamic table, in the logs."""

import logging

import keras

from keras_hybrid.dynamic import dynamic_table


class DynamicTableStats(keras.callbacks.Callback):
    """Adds each `DynamicEmbedding`'s figures for the epoch to the logs.

    At the end of every epoch, for the table of each `DynamicEmbedding` in
    the model (named by its variable's path, `/` written `_`), it adds
    `<table>_rows` (live rows now) and `<table>_admissions`,
    `<table>_evictions`, `<table>_expirations` and `<table>_rejections`
    (during the epoch) to the logs, which `History` and later callbacks
    see, and logs them once per epoch (`logging.INFO`). Under
    `HybridStrategy` on several workers the figures are summed over the
    workers, and each worker's own are added as
    `<table>_<figure>_worker<rank>` (one small all-gather per table).

    ```python
    model.fit(data, callbacks=[keras_hybrid.callbacks.DynamicTableStats()])
    ```
    """

    def __init__(self) -> None:
        super().__init__()
        self._last: dict = {}

    def on_epoch_begin(self, epoch, logs=None):
        del epoch, logs
        for table in dynamic_table.tables_of(self.model.weights):
            self._last[table.name] = table.worker_stats()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        for table in dynamic_table.tables_of(self.model.weights):
            now = table.worker_stats()
            before = self._last.get(table.name) or [{}] * len(now)
            figures = [
                _epoch_figures(n, b) for n, b in zip(now, before, strict=True)
            ]
            prefix = table.name.replace("/", "_")
            for name in figures[0]:
                logs[f"{prefix}_{name}"] = sum(f[name] for f in figures)
                if len(figures) > 1:
                    for rank, worker in enumerate(figures):
                        logs[f"{prefix}_{name}_worker{rank}"] = worker[name]
            logging.info(
                "Epoch %d, dynamic table %s: %s",
                epoch + 1,
                table.name,
                {k: v for k, v in logs.items() if k.startswith(prefix)},
            )


def _epoch_figures(now: dict, before: dict) -> dict:
    """Live rows now, and each counter's growth since `before`."""
    figures = {"rows": now["rows"]}
    for name in dynamic_table.COUNTERS:
        figures[name] = now[name] - before.get(name, 0)
    return figures
