"""The blob of one member's rows of a commit: its arrays (tables and
optimizer slots, in order) as `.npy` records one after the other, which
is what successive `np.save` calls to one file write; `np.load` on the
open file reads them back in turn.

A writer gets the rows as buffers (`blob_pieces`): a record's header, then
its rows' memory as it is, so no copy is made to serialize them (`np.savez`
copied each array and computed its CRC-32 on the commit's background
thread). The directory store writes the pieces to a file, the served
store sends them to the launcher (`contract.commit_server`).

No private hook is touched here.
"""

import io

import numpy as np

from keras_hybrid.contract.blob_stream import write_all


def blob_pieces(arrays) -> list:
    """The buffers of the blob of `arrays`, in order: each array's `.npy`
    header, then its bytes (C order).

    Args:
        arrays: NumPy arrays of numeric dtypes.

    Raises:
        TypeError: If an array holds Python objects.
    """
    pieces = []
    for array in arrays:
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        if array.dtype.hasobject:
            raise TypeError(
                "A commit holds numeric rows. Received an array of dtype "
                f"{array.dtype}."
            )
        pieces.append(_header(array))
        pieces.append(array.reshape(-1).view(np.uint8))
    return pieces


def blob_layout(arrays) -> tuple:
    """Where each of `arrays` goes in their blob: `(records, length)`,
    `records` holding each array's `.npy` header and the offset of its
    rows (which take `array.nbytes` bytes from there), `length` the
    blob's. For writing a blob in place (`mapped_blobs`)."""
    records, offset = [], 0
    for array in arrays:
        header = _header(np.asarray(array))
        offset += len(header)
        records.append((header, offset))
        offset += np.asarray(array).nbytes
    return records, offset


def fill_blob(buffer, arrays) -> list:
    """Writes the blob of `arrays` into `buffer` (writable, of the blob's
    length: `blob_layout`); returns each array's view in it, in order."""
    records, size = blob_layout(arrays)
    length = memoryview(buffer).nbytes
    if length != size:
        raise ValueError(
            f"A blob of {size} bytes does not fit a buffer of {length}."
        )
    views = []
    for (header, offset), array in zip(records, arrays, strict=True):
        array = np.asarray(array)
        buffer[offset - len(header) : offset] = header
        view = np.ndarray(
            array.shape, array.dtype, buffer=buffer, offset=offset
        )
        np.copyto(view, array)
        views.append(view)
    return views


def write_blob(f, arrays) -> None:
    """Writes the blob of `arrays` to the binary file `f` (buffered or
    raw: a raw file may write part of a piece)."""
    for piece in blob_pieces(arrays):
        write_all(f, piece)


def read_blob(data) -> list:
    """The arrays of a blob (bytes-like), in order."""
    size = memoryview(data).nbytes
    f = io.BytesIO(data)
    arrays = []
    while f.tell() < size:
        arrays.append(np.load(f, allow_pickle=False))
    return arrays


def _header(array: np.ndarray) -> bytes:
    # As `np.save` picks it: version 1.0 unless the header is too long.
    header = np.lib.format.header_data_from_array_1_0(array)
    f = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(f, header)
    except ValueError:
        f = io.BytesIO()
        np.lib.format.write_array_header_2_0(f, header)
    return f.getvalue()
