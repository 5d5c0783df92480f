"""`commit_store`: which store an elastic job commits its tables to, and
in which directory."""

import os
import tempfile

from keras_hybrid.launch.elastic import commit_store
from keras_hybrid.testing import TestCase


class ChooseStoreTest(TestCase):
    def test_defaults_directory_on_one_host_or_with_a_dir_else_served(self):
        self.assertEqual(
            commit_store.choose_store(None, None, True), "directory"
        )
        self.assertEqual(
            commit_store.choose_store(None, "/shared", False), "directory"
        )
        self.assertEqual(commit_store.choose_store(None, None, False), "served")
        for store in commit_store.STORES:
            self.assertEqual(
                commit_store.choose_store(store, None, True), store
            )
        self.assertEqual(
            commit_store.choose_store("buddy", None, False), "buddy"
        )

    def test_bad_settings_say_what_to_change(self):
        with self.assertRaisesRegex(ValueError, "Drop one of them"):
            commit_store.choose_store("buddy", "/tmp", True)
        with self.assertRaisesRegex(
            ValueError, "served store keeps its files on the launcher"
        ):
            commit_store.choose_store("served", "/tmp", False)
        with self.assertRaisesRegex(ValueError, "--commit-store served"):
            commit_store.choose_store("directory", None, False)
        with self.assertRaisesRegex(ValueError, "one of"):
            commit_store.choose_store("disk", None, True)


class MakeCommitDirTest(TestCase):
    def test_one_host_defaults_to_a_new_folder_under_dev_shm(self):
        with tempfile.TemporaryDirectory() as run_dir:
            for store in ("directory", "served"):
                path = commit_store.make_commit_dir(store, None, run_dir)
                try:
                    want = "/dev/shm" if os.path.isdir("/dev/shm") else run_dir
                    self.assertEqual(os.path.dirname(path), want)
                    self.assertTrue(os.path.isdir(path))
                finally:
                    commit_store.remove_commit_dir(path)
                self.assertFalse(os.path.exists(path))

    def test_a_given_dir_holds_the_jobs_folder(self):
        with tempfile.TemporaryDirectory() as shared:
            path = commit_store.make_commit_dir("directory", shared, "/x")
            self.assertEqual(os.path.dirname(path), shared)

    def test_buddy_keeps_no_files(self):
        self.assertIsNone(commit_store.make_commit_dir("buddy", None, "/x"))

    def test_a_missing_dir_says_what_to_change(self):
        with self.assertRaisesRegex(ValueError, "existing directory"):
            commit_store.make_commit_dir("directory", "/no/such", "/x")
