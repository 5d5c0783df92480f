"""Arrays on disk that are whole or refused: atomic writes, checked reads.

Every array is one `.npy` file, written to a temporary name, flushed to
disk and renamed, with its size and CRC-32 recorded by the writer. A read
checks both, so a truncated or damaged file is an error naming the file,
never rows of zeros. Plain `.npy` (NumPy's own format) keeps shards
readable without keras_hybrid, and lets a restore memory-map an old shard
and copy only the rows it needs.
"""

import json
import os
import zlib

import numpy as np

_CHUNK = 64 * 2**20


def write_array(path: str, array: np.ndarray) -> dict:
    """Writes `array` to `path` atomically; returns `{"bytes", "crc32"}`."""
    array = np.require(array, requirements="C")
    return write_blocks(path, array.shape, array.dtype, [array])


def write_blocks(path: str, shape, dtype, blocks) -> dict:
    """Writes an array of `shape` from consecutive row `blocks` (an
    iterable of arrays), holding one block at a time. Atomic like
    `write_array`, and readable by `np.load`."""
    dtype = np.dtype(dtype)
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": tuple(shape),
    }
    partial = path + ".partial"
    crc, rows = 0, 0
    with open(partial, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for block in blocks:
            block = np.require(block, dtype=dtype, requirements="C")
            rows += block.shape[0] if block.ndim else 1
            crc = _crc32(block, crc)
            f.write(block.tobytes())
        f.flush()
        os.fsync(f.fileno())
    expected = shape[0] if len(shape) else 1
    if rows != expected:
        os.remove(partial)
        raise ValueError(f"{path!r}: got {rows} rows for shape {shape}.")
    os.replace(partial, path)
    return {"bytes": os.path.getsize(path), "crc32": crc}


def read_array(path: str, record: dict, mmap: bool = False) -> np.ndarray:
    """Reads an array written by `write_array`, checking size and CRC.

    Args:
        path: String. The `.npy` file.
        record: Dict with the `"bytes"` and `"crc32"` the writer recorded.
        mmap: Boolean. Whether to memory-map the file instead of reading it
            (the CRC check still reads it once).

    Raises:
        FileNotFoundError: If the file is missing.
        ValueError: If it is truncated, damaged, or not an array file.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"Checkpoint file {path!r} is missing; the checkpoint is "
            "incomplete. Restore an older one."
        )
    size = os.path.getsize(path)
    if size != record["bytes"]:
        raise ValueError(
            f"Checkpoint file {path!r} has {size} bytes, but {record['bytes']}"
            " were written: it is truncated or was replaced."
        )
    try:
        array = np.load(path, mmap_mode="r" if mmap else None)
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"Checkpoint file {path!r} is unreadable: {e}") from e
    if _crc32(array) != record["crc32"]:
        raise ValueError(
            f"Checkpoint file {path!r} fails its CRC-32 check: it is damaged."
        )
    return array


def write_json(path: str, obj) -> None:
    """Writes `obj` as JSON to `path` atomically."""
    partial = path + ".partial"
    with open(partial, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def read_json(path: str):
    """Reads a JSON file, naming the file in any error."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"Checkpoint file {path!r} is missing.") from e
    except json.JSONDecodeError as e:
        raise ValueError(
            f"Checkpoint file {path!r} is not valid JSON: {e}"
        ) from e


def fsync_dir(path: str) -> None:
    """Makes a rename inside `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _crc32(array: np.ndarray, crc: int = 0) -> int:
    flat = np.require(array, requirements="C").reshape(-1).view(np.uint8)
    for start in range(0, flat.size, _CHUNK):
        crc = zlib.crc32(flat[start : start + _CHUNK], crc)
    return crc
