"""`save_checkpoint` / `restore_checkpoint`: each shard writes its own rows.

A save never touches the previous checkpoint: everything goes into
`ckpt-<step>.tmp`, each worker writes its table rows and optimizer slots in
parallel, and only when all workers have written does the chief write the
manifest and rename the folder. A worker killed mid-save leaves a `.tmp`
folder that restores ignore and the next save clears. See `manifest` for
the layout.
"""

import os
import shutil
import time

import numpy as np
from absl import logging

from keras_hybrid.checkpoint import dynamic_tables
from keras_hybrid.checkpoint import manifest as manifest_lib
from keras_hybrid.checkpoint import model_variables
from keras_hybrid.checkpoint import participants
from keras_hybrid.checkpoint import shard_files
from keras_hybrid.comm import call_fence

DEFAULT_KEEP = 2


@call_fence.fences("save_checkpoint")
def save_checkpoint(
    model,
    directory: str,
    epoch: int | None = None,
    keep: int = DEFAULT_KEEP,
    strategy=None,
) -> str:
    """Saves `model` (weights and optimizer state) as a sharded checkpoint.

    Every worker must call it at the same time. Each writes the rows of the
    partitioned tables (and their optimizer slots) it owns; the chief also
    writes the replicated variables and the manifest. No worker ever holds
    more than its own shard, so tables larger than one host's memory can be
    saved. All workers must see `directory` (a shared file system when
    workers are on several hosts).

    Args:
        model: A built Keras model, trained under `HybridStrategy` or not.
        directory: String. Folder that holds the checkpoints
            (`ckpt-<step>`, step = `optimizer.iterations`).
        epoch: Optional int stored in the manifest (callbacks resume from it).
        keep: Int. How many checkpoints to keep; older ones are deleted
            after the new one is complete. Defaults to `2`.
        strategy: Optional `HybridStrategy`; defaults to the model's.

    Returns:
        The path of the new checkpoint.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"`keep` must be an int >= 1. Received: keep={keep!r}")
    world = participants.of_model(model, strategy)
    tables = dynamic_tables.of_model(model)
    entries = model_variables.entries(
        model, skip=dynamic_tables.variable_ids(tables)
    )
    step = _step(model)
    final = os.path.join(directory, manifest_lib.checkpoint_name(step))
    tmp = final + ".tmp"
    start = time.time()
    error = None
    if world.is_chief:
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
        except OSError as e:
            error = e
    world.agree(error, f"Creating {tmp!r}")
    error = None
    try:
        _write_own_files(entries, tables, tmp, world)
    except Exception as e:  # re-raised by `agree`, on every worker
        error = e
    world.agree(error, f"Writing checkpoint {tmp!r}")
    error = None
    if world.is_chief:
        try:
            _publish(entries, tables, tmp, final, world, step, epoch)
            _prune(directory, keep)
        except Exception as e:
            error = e
    world.agree(error, f"Publishing checkpoint {final!r}")
    logging.info(
        "keras-hybrid: saved checkpoint %s (%d workers) in %.1f s.",
        final,
        world.size,
        time.time() - start,
    )
    return final


def _step(model) -> int:
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not optimizer.built:
        return 0
    return int(np.asarray(optimizer.iterations.numpy()))


def _write_own_files(entries, tables, tmp, world) -> None:
    """Writes this worker's files, then its sidecar `{relative path:
    record}` that the chief reads back."""
    records = {}
    own = manifest_lib.shard_dir(world.rank, world.size)
    os.makedirs(os.path.join(tmp, own), exist_ok=True)
    if world.is_chief:
        os.makedirs(os.path.join(tmp, "dense"), exist_ok=True)
    for index, entry in enumerate(entries):
        if entry.table is not None:
            name = manifest_lib.table_file(index, world.rank, world.size)
            table = entry.table
            records[name] = shard_files.write_blocks(
                os.path.join(tmp, name),
                table.local_shape,
                table.dtype.as_numpy_dtype,
                table.local_blocks(),
            )
        elif world.is_chief:
            name = manifest_lib.dense_file(index)
            value = np.asarray(entry.variable.numpy())
            path = os.path.join(tmp, name)
            records[name] = shard_files.write_array(path, value)
    records.update(dynamic_tables.write_own(tables, tmp, world))
    shard_files.write_json(os.path.join(tmp, own + ".json"), records)


def _publish(entries, tables, tmp, final, world, step, epoch) -> None:
    """Chief: checks every worker's files, writes the manifest, renames."""
    files = {}
    for rank in range(world.size):
        sidecar = manifest_lib.shard_dir(rank, world.size) + ".json"
        files.update(shard_files.read_json(os.path.join(tmp, sidecar)))
    for name, record in files.items():
        size = os.path.getsize(os.path.join(tmp, name))
        if size != record["bytes"]:
            raise ValueError(f"{os.path.join(tmp, name)!r}: short write.")
    variables = []
    for index, entry in enumerate(entries):
        if entry.table is not None:
            names = [
                manifest_lib.table_file(index, shard, world.size)
                for shard in range(world.size)
            ]
            partition = entry.table.partition.get_config()
        else:
            names, partition = [manifest_lib.dense_file(index)], None
        variables.append(
            manifest_lib.VariableRecord(
                entry.path, list(entry.shape), entry.dtype, partition, names
            ).__dict__
        )
    shard_files.write_json(
        os.path.join(tmp, manifest_lib.MANIFEST),
        {
            "format": manifest_lib.FORMAT,
            "step": step,
            "epoch": epoch,
            "num_workers": world.size,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "variables": variables,
            "dynamic_tables": dynamic_tables.manifest_records(tables, world),
            "files": files,
        },
    )
    shard_files.fsync_dir(tmp)
    if os.path.exists(final):  # the same step saved again
        old = final + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    shard_files.fsync_dir(os.path.dirname(final) or ".")


def _prune(directory: str, keep: int) -> None:
    """Deletes all but the newest `keep` checkpoints, and the folders of
    saves that died half-way (a save has just completed, so no other is
    in progress)."""
    for path in manifest_lib.list_checkpoints(directory)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
    for name in os.listdir(directory):
        if name.startswith("ckpt-") and name.endswith((".tmp", ".old")):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
