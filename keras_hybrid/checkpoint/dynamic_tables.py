"""Dynamic tables in a sharded checkpoint: each worker writes its own keys.

A dynamic table's rows sit at positions that mean nothing outside the
worker that holds them, so a checkpoint keeps, per worker, the live keys
with their rows, optimizer slot rows, use counts and last steps, the
admission counts of keys still waiting, and the table's step and
counters. A restore on any worker count reads every saved worker's files
and keeps the keys whose virtual shard its rank now owns
(`KeyOwners.balanced`): virtual shards move whole, whatever the counts.

Files, beside the worker's static rows (`manifest`):

```
shard-00001-of-00004/dynamic-<t>-<field>.npy    table <t>, worker 1
```
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from keras_hybrid.checkpoint import manifest as manifest_lib
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.dynamic import table_state
from keras_hybrid.dynamic.key_owners import KeyOwners


@dataclasses.dataclass(frozen=True)
class SavedTable:
    """A model's dynamic table with its optimizer slots.

    Attributes:
        table: `DynamicTable`.
        slots: Dict `{slot name: keras.Variable}` (Adam's `momentum`...).
    """

    table: object
    slots: dict

    @property
    def path(self) -> str:
        return self.table.name


def of_model(model) -> list[SavedTable]:
    """The dynamic tables among `model`'s weights, with their slots (the
    optimizer must be built to have them)."""
    return [
        SavedTable(table, table_state.slots_of(table))
        for table in dynamic_table.tables_of(model.weights)
    ]


def variable_ids(tables: list[SavedTable]) -> set:
    """Ids of the variables saved here, which the checkpoint's generic
    entries must skip (each worker's copy differs)."""
    ids = set()
    for saved in tables:
        ids.add(id(saved.table.embeddings))
        ids.update(id(v) for v in saved.table.state.values())
        ids.update(id(v) for v in saved.slots.values())
    return ids


def _file(index: int, field: str, rank: int, size: int) -> str:
    return f"{manifest_lib.shard_dir(rank, size)}/dynamic-{index}-{field}.npy"


def write_own(tables: list[SavedTable], tmp: str, world) -> dict:
    """Writes this worker's keys of every table; returns the file records.

    Raises:
        NotImplementedError: For string keys.
    """
    records = {}
    for index, saved in enumerate(tables):
        for field, value in _own_arrays(saved).items():
            name = _file(index, field, world.rank, world.size)
            records[name] = shard_files.write_array(
                os.path.join(tmp, name), value
            )
    return records


def _own_arrays(saved: SavedTable) -> dict:
    table = saved.table
    if table.slot_keys.dtype == tf.string:
        raise NotImplementedError(
            "A sharded checkpoint holds integer keys only. Received: "
            f"dynamic table {table.name} with string keys. Save it with "
            "`model.save`, or train under `keras_hybrid.HybridStrategy` "
            "(one worker will do), which keeps string keys as int64 hashes."
        )
    return table_state.own_arrays(table, saved.slots)


def manifest_records(tables: list[SavedTable], world) -> list[dict]:
    """The manifest's `dynamic_tables`: each table's path, shape, slots and
    files per saved worker."""
    out = []
    for index, saved in enumerate(tables):
        fields = (
            *table_state.key_fields(saved.slots),
            *table_state.COUNT_FIELDS,
            table_state.SCALARS,
        )
        out.append(
            {
                "path": saved.path,
                "shape": [int(d) for d in saved.table.embeddings.shape],
                "slots": sorted(saved.slots),
                "files": {
                    field: [
                        _file(index, field, rank, world.size)
                        for rank in range(world.size)
                    ]
                    for field in fields
                },
            }
        )
    return out


def restore(tables: list[SavedTable], manifest: dict, found: str, world):
    """Loads this worker's keys of every table from checkpoint `found`.

    Raises:
        ValueError: If the tables or their slots differ from the
            checkpoint's, or a worker's keys exceed its table's capacity.
    """
    records = {r["path"]: r for r in manifest.get("dynamic_tables", [])}
    if sorted(records) != sorted(t.path for t in tables):
        raise ValueError(
            f"Checkpoint {found!r} holds dynamic tables {sorted(records)}, "
            f"but the model has {sorted(t.path for t in tables)}. Build the "
            "same model."
        )
    for saved in tables:
        record = records[saved.path]
        if record["slots"] != sorted(saved.slots):
            raise ValueError(
                f"Dynamic table {saved.path} has optimizer slots "
                f"{sorted(saved.slots)} in the model but {record['slots']} "
                f"in checkpoint {found!r}. Compile with the same optimizer."
            )

        def read(field, shard, record=record):
            name = record["files"][field][shard]
            path = os.path.join(found, name)
            return shard_files.read_array(path, manifest["files"][name])

        _restore_table(saved, record, read, world)


def _restore_table(saved: SavedTable, record: dict, read, world) -> None:
    shards = range(len(record["files"]["keys"]))
    fields = table_state.key_fields(saved.slots)
    owners = KeyOwners.balanced(world.size)

    def mine(keys):
        ranks = owners.owner_of(tf.constant(keys, tf.int64)).numpy()
        return ranks == world.rank

    own = {f: [] for f in (*fields, *table_state.COUNT_FIELDS)}
    scalars = []
    for shard in shards:
        keep = mine(read("keys", shard))
        for field in fields:
            own[field].append(read(field, shard)[keep])
        count_keys = read("count_keys", shard)
        keep = mine(count_keys)
        own["count_keys"].append(count_keys[keep])
        own["count_values"].append(read("count_values", shard)[keep])
        scalars.append(read(table_state.SCALARS, shard))
    own = {f: np.concatenate(v) for f, v in own.items()}
    scalars = np.stack(scalars)
    # Every worker's step is the same; the counters are job totals, kept
    # by the first worker so that sums over workers stay right.
    totals = scalars[:, 1:].sum(0)
    if not world.is_chief:
        totals = np.zeros_like(totals)
    own[table_state.SCALARS] = np.array([scalars[:, 0].max(), *totals])
    table_state.load(
        saved.table,
        saved.slots,
        own,
        f"worker {world.rank} of {world.size}",
    )
