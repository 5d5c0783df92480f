"""Pool scenario: trains `traffic_model` and returns the bytes it sent
per step.

Run by `test_traffic_multiprocess.py` on the pool of 2 workers. With
`mode="hybrid"` the table is partitioned; with `mode="allgather"` it is
kept replicated (`variable_kinds`), so its `IndexedSlices` gradient is
all-gathered as stock TensorFlow does. With `mode="dynamic"` the model has
a `DynamicEmbedding` of the ids' keys (`traffic_model.to_keys`).
"""

import keras
import numpy as np
import traffic_model as tm  # noqa: I001  (sits beside this module)

import keras_hybrid as kh
from keras_hybrid.comm.comm_stats import PATHS

MODES = ("hybrid", "allgather", "dynamic")


class StepBytes(keras.callbacks.Callback):
    """Bytes sent per path in each train step."""

    def __init__(self, stats) -> None:
        super().__init__()
        self._stats = stats
        self.rows: list[list[int]] = []

    def _now(self):
        snap = self._stats.snapshot()
        return [snap[p]["bytes"] for p in PATHS]

    def on_train_batch_begin(self, batch, logs=None):
        self._last = self._now()

    def on_train_batch_end(self, batch, logs=None):
        now = self._now()
        self.rows.append([a - b for a, b in zip(now, self._last, strict=True)])


def measure(mode: str, warmup_steps: int, steps: int) -> dict:
    """Trains `warmup_steps`, then records the bytes of `steps` more."""
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}: {mode!r}")
    keras.utils.set_random_seed(0)
    # Both modes are fixed: the test compares the simulator with each path.
    kinds = {
        ".*tokens/embeddings": "dense" if mode == "allgather" else "sparse"
    }
    if mode == "dynamic":
        kinds = None  # a dynamic table has its own placement
    # allgather: stock TF's path, whatever the cost rule would choose.
    slices = "allgather" if mode == "allgather" else None
    with kh.HybridStrategy(
        variable_kinds=kinds, indexed_slices=slices
    ) as strategy:
        return _measure(strategy, warmup_steps, steps, mode == "dynamic")


def _measure(strategy, warmup_steps: int, steps: int, dynamic: bool) -> dict:
    global_batch = tm.SEQS_PER_WORKER * strategy.size
    ids, labels = tm.make_data((warmup_steps + steps) * global_batch)
    if dynamic:
        ids = tm.to_keys(ids)
    with strategy.scope():
        model = tm.build_dynamic_model() if dynamic else tm.build_model()
    split = warmup_steps * global_batch
    fit = dict(batch_size=global_batch, shuffle=False, verbose=0)
    model.fit(ids[:split], labels[:split], **fit)
    recorder = StepBytes(strategy.communicator.stats)
    model.fit(ids[split:], labels[split:], callbacks=[recorder], **fit)
    return {
        "size": strategy.size,
        "paths": PATHS,
        "sent": np.array(recorder.rows, np.int64),
        "kinds": {v.path: v.kind for v in strategy.plan.variables},
    }
