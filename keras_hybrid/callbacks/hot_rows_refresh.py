"""`HotRowsRefresh`: re-chooses each table's hot rows every few steps."""

import keras

from keras_hybrid.strategy import hybrid_extended


class HotRowsRefresh(keras.callbacks.Callback):
    """Every `every` train steps, makes the most requested rows of each
    partitioned table its hot rows (`HybridStrategy(hot_rows=K)`).

    The counts run from the start of training (`sparse.hot_rows`). The
    choice is a collective between steps: every worker must use this
    callback with the same `every`. Without it the hot set stays the first
    K ids. Under a strategy without hot rows it does nothing.

    Args:
        every: Int. Train steps between two choices. Defaults to `50`.

    Example:

    ```python
    strategy = keras_hybrid.HybridStrategy(hot_rows=256)
    ...
    model.fit(data, callbacks=[keras_hybrid.callbacks.HotRowsRefresh(20)])
    ```

    Raises:
        ValueError: If `every` is not a positive int.
    """

    def __init__(self, every: int = 50) -> None:
        super().__init__()
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(
                "`every` must be a positive int (train steps between two "
                f"choices of hot rows). Received: every={every!r}"
            )
        self.every = every
        self._steps = 0
        # Kept for tests and logs: the ids chosen last, per table path.
        self.chosen: dict = {}

    def on_train_batch_end(self, batch, logs=None):
        del batch, logs
        self._steps += 1
        if self._steps % self.every == 0:
            self.refresh()

    def refresh(self) -> None:
        """Chooses the hot rows of every table now (a collective)."""
        strategy = self.model.distribute_strategy
        if not hybrid_extended.is_hybrid(strategy):
            return
        for table in strategy.extended.router.sharded_tables():
            if table.role == "table" and table.hot is not None:
                self.chosen[table.path] = table.hot.choose()
