"""`restore_checkpoint`: loads a sharded checkpoint on any number of workers.

The checkpoint's worker count need not match: each table's rows are
regrouped for the restoring partition (`resharding`), a partitioned table
restores into a whole variable (one process, plain Keras) and the other
way round. Every file is checked (size, CRC) before its rows are used.
"""

import os

import numpy as np
from absl import logging

from keras_hybrid.checkpoint import dynamic_tables
from keras_hybrid.checkpoint import manifest as manifest_lib
from keras_hybrid.checkpoint import model_variables
from keras_hybrid.checkpoint import participants
from keras_hybrid.checkpoint import saved_rows
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.comm import call_fence
from keras_hybrid.sharding.row_partition import RowPartition


@call_fence.fences("restore_checkpoint")
def restore_checkpoint(model, path: str, strategy=None) -> dict:
    """Restores weights and optimizer state saved by `save_checkpoint`.

    Every worker must call it at the same time. The model must have the
    checkpoint's variables (same paths and shapes); build and compile it
    first. An unbuilt optimizer is built so its state can be restored.

    Args:
        model: A built Keras model, under `HybridStrategy` or not.
        path: String. A checkpoint folder, or a folder of checkpoints (the
            newest complete one is used).
        strategy: Optional `HybridStrategy`; defaults to the model's.

    Returns:
        The manifest (a dict with `"step"`, `"epoch"`, `"num_workers"`, ...).

    Raises:
        FileNotFoundError: If there is no complete checkpoint at `path`, or a
            file is missing.
        ValueError: If the model's variables differ from the checkpoint's
            (naming the variable and both shapes), or a file is truncated or
            damaged (naming the file).
    """
    world = participants.of_model(model, strategy)
    found = manifest_lib.latest_checkpoint(path)
    if found is None:
        raise FileNotFoundError(
            f"No complete checkpoint (a folder with {manifest_lib.MANIFEST}) "
            f"at {path!r}."
        )
    error, manifest = None, None
    try:
        manifest = _read_manifest(found)
        entries = model_variables.entries(model, build_optimizer=True)
        tables = dynamic_tables.of_model(model)
        skip = dynamic_tables.variable_ids(tables)
        entries = [e for e in entries if id(e.variable) not in skip]
        saved = _match(entries, manifest["variables"], found)
        for entry in entries:
            _restore_one(entry, saved[entry.path], found, manifest, world)
        dynamic_tables.restore(tables, manifest, found, world)
    except Exception as e:  # re-raised by `agree`, on every worker
        error = e
    world.agree(error, f"Restoring {found!r}")
    logging.info(
        "keras-hybrid: restored %s (step %d, saved by %d workers) on %d.",
        found,
        manifest["step"],
        manifest["num_workers"],
        world.size,
    )
    return manifest


def _read_manifest(found: str) -> dict:
    manifest = shard_files.read_json(os.path.join(found, manifest_lib.MANIFEST))
    if manifest.get("format") != manifest_lib.FORMAT:
        raise ValueError(
            f"{found!r} is not a keras-hybrid sharded checkpoint (format "
            f"{manifest.get('format')!r}, expected {manifest_lib.FORMAT!r})."
        )
    return manifest


def _match(entries, records, found) -> dict:
    """Pairs model variables with saved ones; refuses any difference.

    Variables pair by path. A model built again in the same process gets
    new automatic layer names (`dense_1`); when every path differs only so
    and the variables, in order, have the saved shapes, they pair by
    position, as Keras' own `load_weights` does.
    """
    saved = {r["path"]: r for r in records}
    paths = [e.path for e in entries]
    if set(paths) != set(saved) and _same_layout(entries, records):
        logging.warning(
            "keras-hybrid: variable paths differ from checkpoint %s; "
            "restoring by position (same shapes in the same order).",
            found,
        )
        return {e.path: r for e, r in zip(entries, records, strict=True)}
    for entry in entries:
        record = saved.get(entry.path)
        if record is None:
            raise ValueError(
                f"Variable {entry.path!r} (shape {entry.shape}) of the model "
                f"is not in checkpoint {found!r}. Saved variables: "
                f"{sorted(saved)}"
            )
        if tuple(record["shape"]) != entry.shape:
            raise ValueError(
                f"Variable {entry.path!r} has shape {entry.shape} in the "
                f"model but {tuple(record['shape'])} in checkpoint {found!r}."
            )
    extra = sorted(set(saved) - {e.path for e in entries})
    if extra:
        raise ValueError(
            f"Checkpoint {found!r} has variables the model lacks: {extra}. "
            "Build the same model (and compile it with the same optimizer "
            "to restore optimizer state)."
        )
    return saved


def _same_layout(entries, records) -> bool:
    if len(entries) != len(records):
        return False
    pairs = zip(entries, records, strict=True)
    return all(e.shape == tuple(r["shape"]) for e, r in pairs)


def _restore_one(entry, record, found, manifest, world) -> None:
    def read(name, mmap=False):
        return shard_files.read_array(
            os.path.join(found, name), manifest["files"][name], mmap=mmap
        )

    if record["partition"] is None:
        value = read(record["files"][0])
        if entry.table is not None:
            entry.table.assign(value)  # keeps this shard's rows
        else:
            entry.variable.assign(value)
        return
    saved = RowPartition.from_config(record["partition"])
    cache = {}

    def read_shard(shard):
        if shard not in cache:
            cache[shard] = read(record["files"][shard], mmap=True)
        return cache[shard]

    if entry.table is not None:
        ids = entry.table.partition.ids_on_shard(world.rank)
        rows = saved_rows.rows_for_ids(ids, saved, read_shard)
        entry.table.assign_local_rows(np.asarray(rows))
    else:
        entry.variable.assign(saved_rows.full_table(saved, read_shard))
