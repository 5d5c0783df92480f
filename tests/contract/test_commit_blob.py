"""`commit_blob`: a member's rows of a commit as `.npy` records one after
the other, byte for byte what successive `np.save` calls write."""

import io
import tempfile

import numpy as np
import pytest

from keras_hybrid.contract import commit_blob

ARRAYS = [
    np.arange(24, dtype="float32").reshape(6, 4),  # a table's rows
    np.full((6, 4), 0.5, dtype="float32"),  # a slot
    np.zeros((0, 4), dtype="float32"),  # a member without rows
    np.arange(6, dtype="int64"),
    np.asfortranarray(np.arange(6, dtype="float64").reshape(2, 3)),
    np.float32(3.0) * np.ones(()),  # a scalar
]


def _saved(arrays) -> bytes:
    f = io.BytesIO()
    for array in arrays:
        np.save(f, array, allow_pickle=False)
    return f.getvalue()


def test_the_blob_is_what_np_save_writes():
    f = io.BytesIO()
    commit_blob.write_blob(f, ARRAYS)
    # Fortran order is written as C order (the rows are copied once).
    c_order = [a.copy(order="C") for a in ARRAYS]
    assert f.getvalue() == _saved(c_order)


def test_arrays_come_back_in_order():
    f = io.BytesIO()
    commit_blob.write_blob(f, ARRAYS)
    for data in (f.getvalue(), bytearray(f.getvalue())):
        back = commit_blob.read_blob(data)
        assert len(back) == len(ARRAYS)
        for a, b in zip(ARRAYS, back, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    assert commit_blob.read_blob(b"") == []


def test_a_file_of_the_directory_store_is_read_by_np_load():
    with tempfile.TemporaryFile() as f:
        commit_blob.write_blob(f, ARRAYS[:2])
        f.seek(0)
        np.testing.assert_array_equal(np.load(f), ARRAYS[0])
        np.testing.assert_array_equal(np.load(f), ARRAYS[1])


def test_the_rows_are_not_copied():
    rows = np.arange(12, dtype="float32").reshape(3, 4)
    header, data = commit_blob.blob_pieces([rows])
    assert isinstance(header, bytes)
    assert np.shares_memory(data, rows) and data.nbytes == rows.nbytes


def test_python_objects_are_refused():
    with pytest.raises(TypeError, match="numeric rows. Received .*object"):
        commit_blob.blob_pieces([np.array([{}, 1], dtype=object)])
