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

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.checkpoint import manifest as manifest_lib
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.dynamic import dynamic_table
from keras_hybrid.dynamic import optimizer_slots
from keras_hybrid.dynamic.key_owners import KeyOwners

# Per-row fields saved for each live key, besides its slot rows.
_ROW_FIELDS = ("keys", "rows", "uses", "last_step")
# Waiting keys and their packed counts (`DynamicTable.counts`).
_COUNT_FIELDS = ("count_keys", "count_values")
# `[step, *COUNTERS]` of one worker's table.
_SCALARS = "scalars"
_SLOT = "slot_"


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


def of_model(model: keras.Model) -> list[SavedTable]:
    """The dynamic tables among `model`'s weights, with their slots (the
    optimizer must be built to have them)."""
    found = []
    for table in dynamic_table.tables_of(model.weights):
        prefix = table.embeddings.path.replace("/", "_") + "_"
        slots = {
            s.variable.name[len(prefix) :]: s.variable
            for s in optimizer_slots.find(table.embeddings)
        }
        found.append(SavedTable(table, slots))
    return found


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
            "`model.save`, or hash the keys to int64."
        )
    live = np.flatnonzero(_numpy(table.state["live"]))
    count_keys, count_values = table.counts.export()
    arrays = {
        "keys": table.slot_keys.numpy()[live],
        "rows": _numpy(table.embeddings)[live],
        "uses": _numpy(table.state["uses"])[live],
        "last_step": _numpy(table.state["last_step"])[live],
        "count_keys": count_keys.numpy().reshape(-1),
        "count_values": count_values.numpy().reshape(-1),
        _SCALARS: np.array(
            [_numpy(table.state[n]) for n in ("step", *dynamic_table.COUNTERS)],
            np.int64,
        ),
    }
    for name, variable in sorted(saved.slots.items()):
        arrays[_SLOT + name] = _numpy(variable)[live]
    return arrays


def manifest_records(tables: list[SavedTable], world) -> list[dict]:
    """The manifest's `dynamic_tables`: each table's path, shape, slots and
    files per saved worker."""
    out = []
    for index, saved in enumerate(tables):
        fields = (
            *_ROW_FIELDS,
            *_COUNT_FIELDS,
            _SCALARS,
            *(_SLOT + n for n in sorted(saved.slots)),
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
    table = saved.table
    shards = range(len(record["files"]["keys"]))
    fields = (*_ROW_FIELDS, *(_SLOT + n for n in sorted(saved.slots)))
    owners = KeyOwners.balanced(world.size)

    def mine(keys):
        ranks = owners.owner_of(tf.constant(keys, tf.int64)).numpy()
        return ranks == world.rank

    own = {f: [] for f in fields}
    waiting = {f: [] for f in _COUNT_FIELDS}
    scalars = []
    for shard in shards:
        keep = mine(read("keys", shard))
        for field in fields:
            own[field].append(read(field, shard)[keep])
        count_keys = read("count_keys", shard)
        keep = mine(count_keys)
        waiting["count_keys"].append(count_keys[keep])
        waiting["count_values"].append(read("count_values", shard)[keep])
        scalars.append(read(_SCALARS, shard))
    own = {f: np.concatenate(v) for f, v in own.items()}
    count = len(own["keys"])
    if count > table.capacity:
        raise ValueError(
            f"Dynamic table {table.name} gets {count} keys on worker "
            f"{world.rank} of {world.size}, more than its capacity "
            f"{table.capacity}. Restore on more workers, or with a larger "
            "`capacity`."
        )
    _fill(table.embeddings, own["rows"], count)
    for name, variable in saved.slots.items():
        _fill(variable, own[_SLOT + name], count)
    _fill(table.state["live"], np.ones(count), count)
    _fill(table.state["uses"], own["uses"], count)
    _fill(table.state["last_step"], own["last_step"], count)
    keys = np.zeros([table.capacity], np.int64)
    keys[:count] = own["keys"]
    table.slot_keys.assign(keys)
    scalars = np.stack(scalars)
    # Every worker's step is the same; the counters are job totals, kept
    # by the first worker so that sums over workers stay right.
    table.state["step"].assign(scalars[:, 0].max())
    totals = scalars[:, 1:].sum(0)
    if not world.is_chief:
        totals = np.zeros_like(totals)
    for name, total in zip(dynamic_table.COUNTERS, totals, strict=True):
        table.state[name].assign(np.int64(total))
    table.reload()
    table.counts.remove(table.counts.export()[0])
    table.counts.insert(
        tf.constant(np.concatenate(waiting["count_keys"]), tf.int64),
        tf.constant(np.concatenate(waiting["count_values"]), tf.int64),
    )


def _fill(variable, values: np.ndarray, count: int) -> None:
    """Sets the first `count` rows of `variable` to `values`, zeros after."""
    full = np.zeros(tuple(variable.shape), _numpy(variable).dtype)
    full[:count] = np.asarray(values).reshape((count, *full.shape[1:]))
    variable.assign(full)


def _numpy(variable) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable))
