"""Partitioned tables go into Keras' `.h5` weight files block by block.

Keras' `H5IOStore.__setitem__` turns a variable into one NumPy array
(`convert_to_numpy`, which NumPy copies once more) before writing it: for a
gathered table that is two or three whole copies on the chief. For a
variable backed by a `ShardedTable`, this writes the HDF5 dataset in blocks
of consecutive ids as they are gathered (`ShardedTable.id_blocks`), so the
chief holds about one block, whatever the table's size. Other ranks take
part in the gathers and write nothing (their file is a scratch file).

Keras' store is reached through `_compat.keras`: the patch site
`H5IOStore.__setitem__`, and `h5_dataset`.
"""

from keras_hybrid._compat import keras as keras_compat
from keras_hybrid.patches.patch_set import PRIVATE_KERAS
from keras_hybrid.patches.patch_set import Patch
from keras_hybrid.patches.patch_set import PatchSet
from keras_hybrid.sparse.sharded_table import ShardedTable

_serving = {"strategy": None}


def _follow(strategy) -> None:
    _serving["strategy"] = strategy


def _setitem_of(original):
    def setitem(entry, key, value):
        table = getattr(value, "value", None)
        if not isinstance(table, ShardedTable) or entry.mode not in "wa":
            return original(entry, key, value)
        strategy = _serving["strategy"]
        _write_table(entry, key, table, strategy is None or strategy.is_chief)
        return None

    return setitem


PATCHES = PatchSet(
    "h5_streaming",
    (Patch(PRIVATE_KERAS, "H5IOStore.__setitem__", _setitem_of),),
    follow=_follow,
)


def _write_table(entry, key, table: ShardedTable, write: bool) -> None:
    dataset = None
    if write:
        dataset = keras_compat.h5_dataset(
            entry, key, table.full_shape, table.dtype.as_numpy_dtype
        )
    for start, rows in table.id_blocks():
        if dataset is not None:
            dataset[start : start + len(rows)] = rows
