"""Saving and restoring models whose tables are split over workers.

- Standard Keras files (`model.save`, `save_weights`, `export`) work under
  `HybridStrategy`: every rank takes part, the chief writes (`chief_writes`).
- Sharded checkpoints: each worker writes its own rows, and any number of
  workers restores them (`save_checkpoint`, `restore_checkpoint`).
"""

from keras_hybrid.checkpoint.manifest import latest_checkpoint
from keras_hybrid.checkpoint.restore import restore_checkpoint
from keras_hybrid.checkpoint.save import save_checkpoint

__all__ = ["latest_checkpoint", "restore_checkpoint", "save_checkpoint"]
