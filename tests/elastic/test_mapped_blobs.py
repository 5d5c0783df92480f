"""`contract.mapped_blobs`: commit blobs written through a mapping of
their file read back as the blobs `commit_blob.write_blob` writes."""

import os
import tempfile

import numpy as np

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.mapped_blobs import MappedBlobs
from keras_hybrid.testing import TestCase


def _arrays(rows: int, value: float) -> list:
    return [
        np.full((rows, 4), value, "float32"),
        np.arange(rows * 2, dtype="int64").reshape(rows, 2),
    ]


class MappedBlobsTest(TestCase):
    def test_a_blob_is_what_write_blob_writes(self):
        with tempfile.TemporaryDirectory() as root:
            files = CommitFiles(root)
            blobs = MappedBlobs(files, 3)
            arrays = _arrays(5, 1.5)
            temp, views = blobs.fill(arrays)
            blobs.publish(temp, "commit-10-g0", ["commit-10-g0"])
            data = files.read("commit-10-g0", 3)
            with open(os.path.join(root, "reference"), "wb") as f:
                commit_blob.write_blob(f, arrays)
            with open(os.path.join(root, "reference"), "rb") as f:
                self.assertEqual(data, f.read())
        for view, array in zip(views, arrays, strict=True):
            np.testing.assert_array_equal(view, array)

    def test_a_blob_of_another_size_takes_a_new_file(self):
        with tempfile.TemporaryDirectory() as root:
            files = CommitFiles(root)
            blobs = MappedBlobs(files, 0)
            temp, first = blobs.fill(_arrays(5, 1.0))
            blobs.publish(temp, "commit-1-g0", [])  # pruned: the spare
            temp, second = blobs.fill(_arrays(7, 2.0))
            blobs.publish(temp, "commit-2-g0", ["commit-2-g0"])
            (rows, _) = commit_blob.read_blob(files.read("commit-2-g0", 0))
        # The spare had 5 rows: the 7 went elsewhere, and the views of the
        # first mapping still hold what they held.
        self.assertFalse(np.shares_memory(first[0], second[0]))
        np.testing.assert_array_equal(first[0], np.full((5, 4), 1.0))
        np.testing.assert_array_equal(rows, np.full((7, 4), 2.0))
