"""Keras callbacks for training under `HybridStrategy`, and for dynamic
tables (`DynamicTableStats`)."""

import importlib

_EXPORTS = {
    "CommunicationStats": "keras_hybrid.callbacks.communication_stats",
    "DynamicTableStats": "keras_hybrid.callbacks.dynamic_table_stats",
    "HotRowsRefresh": "keras_hybrid.callbacks.hot_rows_refresh",
    "ShardedCheckpoint": "keras_hybrid.callbacks.sharded_checkpoint",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
