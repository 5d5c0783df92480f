"""What a dynamic table's memory costs, and a clear error when a worker
does not have it.

A table holds `capacity` rows from the start (free rows are zeros), so it
costs its whole size when it is built. TensorFlow reports a failed
allocation as "OOM when allocating tensor with shape[...]", naming
neither the table nor its capacity; and on Linux a fill that fits the
address space but not the memory is ended by the kernel's OOM killer,
with no message at all, or ends another process. So the table checks
the host's available memory (`MemAvailable` of `/proc/meminfo`) before
it allocates, and names itself and its capacity in either error.
"""

import contextlib

import numpy as np
import tensorflow as tf

_MEMINFO = "/proc/meminfo"
# Per row beside the embedding: the key (int64, or a TF string's 24-byte
# header), `live` (int8), `uses` and `last_step` (int64).
_STATE_BYTES = 1 + 8 + 8


def row_bytes(output_dim: int, dtype, key_dtype: str) -> int:
    """Bytes one row of a table costs when built: the embedding, the key
    and the row's counters (optimizer slots come on top)."""
    key = 24 if key_dtype == "string" else 8
    return output_dim * np.dtype(dtype).itemsize + key + _STATE_BYTES


def available_bytes(path: str = _MEMINFO) -> int | None:
    """The host's `MemAvailable` in bytes, or None where it is unknown."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _where(rank: int | None) -> str:
    return "in this process" if rank is None else f"on worker {rank}"


def _describe(name, capacity, output_dim, dtype, need, rank) -> str:
    return (
        f"DynamicEmbedding '{name}' needs {need / 1e9:.1f} GB for its "
        f"table {_where(rank)}: capacity={capacity:,} rows of {output_dim} "
        f"{np.dtype(dtype).name} with each row's key and counters. "
        "`capacity` is rows per worker, and each optimizer slot (Adam "
        "has 2) takes as much as the rows again. Lower `capacity`, or "
        "spread the keys over more workers."
    )


def allocating(
    name: str,
    capacity: int,
    output_dim: int,
    dtype,
    key_dtype: str,
    rank: int | None = None,
    available: int | None = None,
):
    """A context that runs the table's allocation after checking it fits.

    Args:
        name: String. The layer's name, for messages.
        capacity: Int. Rows of the table on this worker.
        output_dim: Int. Width of a row.
        dtype: The embedding's dtype.
        key_dtype: String. `"int64"` or `"string"`.
        rank: Int, or None in one plain process.
        available: Int. Bytes this process may take; defaults to
            `available_bytes()`.

    Raises:
        tf.errors.ResourceExhaustedError: Naming the table and its
            capacity, before allocating when the host's available
            memory is short, or when TensorFlow's allocation fails.
    """
    need = capacity * row_bytes(output_dim, dtype, key_dtype)
    message = _describe(name, capacity, output_dim, dtype, need, rank)
    return _guarded(message, need, available)


def slot_allocating(
    name: str,
    capacity: int,
    output_dim: int,
    dtype,
    rank: int | None,
    slot: str,
    available: int | None = None,
):
    """`allocating` for optimizer slot `slot` (its variable's name) of
    the table named `name` (its variable's path), which has as many rows
    as the table.

    Under `HybridStrategy` the slot is made where the strategy can see it
    (`strategy.local_variables`); with no strategy Keras makes it out of
    reach, and a slot that does not fit fails with TensorFlow's message.
    """
    need = capacity * output_dim * np.dtype(dtype).itemsize
    message = (
        f"Dynamic table '{name}' needs {need / 1e9:.1f} GB more for "
        f"the optimizer slot {slot} {_where(rank)}: one value per row and "
        f"column, capacity={capacity:,} rows of {output_dim} "
        f"{np.dtype(dtype).name}. `capacity` is rows per worker. Lower "
        "it, spread the keys over more workers, or use an optimizer with "
        "fewer slots (SGD has none, Adagrad one, Adam two)."
    )
    return _guarded(message, need, available)


@contextlib.contextmanager
def _guarded(message: str, need: int, available: int | None):
    if available is None:
        available = available_bytes()
    if available is not None and need > available:
        raise tf.errors.ResourceExhaustedError(
            None,
            None,
            f"{message} This host has {available / 1e9:.1f} GB available.",
        )
    try:
        yield
    except tf.errors.ResourceExhaustedError as error:
        raise tf.errors.ResourceExhaustedError(
            error.node_def, error.op, f"{message} ({error.message})"
        ) from error
