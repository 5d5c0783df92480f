"""Keras callbacks for training under `HybridStrategy`, and for dynamic
tables (`DynamicTableStats`)."""

from keras_hybrid.utils import lazy_exports

_SOURCES = {
    "CommunicationStats": "keras_hybrid.callbacks.communication_stats",
    "DynamicTableStats": "keras_hybrid.callbacks.dynamic_table_stats",
    "HotRowsRefresh": "keras_hybrid.callbacks.hot_rows_refresh",
    "ShardedCheckpoint": "keras_hybrid.callbacks.sharded_checkpoint",
}

__all__ = sorted(_SOURCES)
__getattr__ = lazy_exports.lazy_getattr(__name__, _SOURCES)
