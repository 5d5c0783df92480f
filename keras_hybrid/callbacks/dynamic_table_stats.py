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
    see, and logs them once per epoch (`logging.INFO`).

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
            self._last[table.name] = table.stats()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        for table in dynamic_table.tables_of(self.model.weights):
            now = table.stats()
            before = self._last.get(table.name, {})
            prefix = table.name.replace("/", "_")
            logs[f"{prefix}_rows"] = now["rows"]
            for name in dynamic_table.COUNTERS:
                logs[f"{prefix}_{name}"] = now[name] - before.get(name, 0)
            logging.info(
                "Epoch %d, dynamic table %s: %s",
                epoch + 1,
                table.name,
                {k: v for k, v in logs.items() if k.startswith(prefix)},
            )
