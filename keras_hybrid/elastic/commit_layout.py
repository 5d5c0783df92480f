"""The layout of a commit of partitioned tables, for survivors that lack it.

A worker lost within a step of a grow, before the new members' first
commit, leaves survivors that agree on a commit taken before the joiners
came (`ElasticRecovery`). A joiner holds no copy of it, but needs none of
its rows: it owned none of the commit's virtual shards, and a lost
member's shards go to a surviving member of the commit (its buddy, or the
next one reading its file). It needs the commit's layout only: its
members, its folder, the count of its buddy copies (the buddy store),
and, per table and slot, the path, the `RowPartition` at
the commit, the row shape and the dtype. The lowest rank that holds the
commit broadcasts that layout as JSON bytes (`broadcast_layout`); a
survivor that lacks the commit makes from it a copy with no rows of its
own, and gets its rows in the re-balance that follows the restore
(`buddy_store.restore`).

No private hook is touched here.
"""

import json

import numpy as np
import tensorflow as tf

from keras_hybrid.elastic.file_store import TableCopy
from keras_hybrid.sharding.row_partition import RowPartition


def layout_of(copy: dict) -> dict:
    """The JSON-able layout of the commit of tables `copy` (a store's
    `take` result)."""
    layout = {
        "members": [int(t) for t in copy["members"]],
        "tables": [
            {
                "path": c.path,
                "partition": None
                if c.partition is None
                else c.partition.get_config(),
                "row_shape": [int(d) for d in c.own.shape[1:]],
                "dtype": np.dtype(c.own.dtype).str,
            }
            for c in copy["tables"]
        ],
    }
    if "folder" in copy:
        layout["folder"] = copy["folder"]
    if "copies" in copy:
        layout["copies"] = int(copy["copies"])
    return layout


def copy_from_layout(layout: dict, files=None) -> dict:
    """A commit of tables with `layout` in which this worker holds no rows
    (and no buddy copy); `files` are where this worker reads lost rows
    (`ElasticCommit.files`: a file store's files, or its buddy copies)."""
    copies = [
        TableCopy(
            path=t["path"],
            partition=None
            if t["partition"] is None
            else RowPartition.from_config(t["partition"]),
            own=np.zeros([0, *t["row_shape"]], np.dtype(t["dtype"])),
            buddy=None,
        )
        for t in layout["tables"]
    ]
    copy = {"members": list(layout["members"]), "tables": copies, "bytes": 0}
    if "folder" in layout:
        copy["folder"] = layout["folder"]
        copy["files"] = files
    if "copies" in layout:
        copy["copies"] = layout["copies"]
    return copy


def broadcast_layout(
    comm, copy: dict | None, files=None, root: int = 0
) -> dict:
    """Rank `root`'s commit of tables `copy` as every worker needs it: a
    worker that holds the commit keeps its own `copy`, one that lacks it
    (passes None) gets a copy without rows from the root's layout, reading
    lost rows from `files` (`ElasticCommit.files`).

    A collective over the workers of `comm`; call it only when the model
    has partitioned tables (the root's `copy` is then not None, and the
    bytes sent are never empty: TF 2.21 crashes on an empty broadcast).

    Raises:
        RuntimeError: If the root passes None.
    """
    if comm.rank == root:
        if copy is None:
            raise RuntimeError(
                f"Rank {root} holds no commit of partitioned tables to send "
                "to the survivors that lack it."
            )
        data = np.frombuffer(json.dumps(layout_of(copy)).encode(), np.uint8)
    else:
        data = np.zeros([0], np.uint8)
    length = comm.broadcast(tf.constant([data.size], tf.int64), root=root)
    size = int(np.asarray(length)[0])
    sent = np.zeros([size], np.int32)
    sent[: data.size] = data
    received = np.asarray(comm.broadcast(tf.constant(sent), root=root))
    if copy is not None:
        return copy
    layout = json.loads(received.astype(np.uint8).tobytes())
    return copy_from_layout(layout, files)
