"""`commit_store`: which directory (if any) an elastic job commits to."""

import os
import tempfile

from keras_hybrid.launch import commit_store
from keras_hybrid.testing import TestCase


class MakeCommitDirTest(TestCase):
    def test_one_host_defaults_to_a_new_folder_under_dev_shm(self):
        with tempfile.TemporaryDirectory() as run_dir:
            path = commit_store.make_commit_dir(
                "directory", None, run_dir, True
            )
            try:
                want = "/dev/shm" if os.path.isdir("/dev/shm") else run_dir
                self.assertEqual(os.path.dirname(path), want)
                self.assertTrue(os.path.isdir(path))
            finally:
                commit_store.remove_commit_dir(path)
            self.assertFalse(os.path.exists(path))

    def test_a_given_dir_holds_the_jobs_folder(self):
        with tempfile.TemporaryDirectory() as shared:
            path = commit_store.make_commit_dir(
                "directory", shared, "/x", False
            )
            self.assertEqual(os.path.dirname(path), shared)

    def test_buddy_and_multi_host_without_a_dir_keep_no_files(self):
        self.assertIsNone(
            commit_store.make_commit_dir("buddy", None, "/x", True)
        )
        self.assertIsNone(
            commit_store.make_commit_dir("directory", None, "/x", False)
        )

    def test_bad_settings_say_what_to_change(self):
        with self.assertRaisesRegex(ValueError, "Drop one of them"):
            commit_store.make_commit_dir("buddy", "/tmp", "/x", True)
        with self.assertRaisesRegex(ValueError, "existing directory"):
            commit_store.make_commit_dir("directory", "/no/such", "/x", True)
        with self.assertRaisesRegex(ValueError, "one of"):
            commit_store.make_commit_dir("disk", None, "/x", True)
