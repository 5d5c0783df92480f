"""The chief's `model.save` and `save_weights` never leave a file cut
short where the user asked: the chief writes a hidden file beside it and
renames it once every rank succeeded (a worker killed in the save, or a
failure on another rank, leaves the path as it was)."""

import dataclasses
import os
import tempfile
from unittest import mock

import keras
import numpy as np
import tensorflow as tf

from keras_hybrid.patches import chief_writes
from keras_hybrid.testing import TestCase
from tests.patches.test_chief_writes import _Rank
from tests.patches.test_chief_writes import _SumOfOne
from tests.patches.test_chief_writes import install_chief_writes
from tests.patches.test_chief_writes import small_model


class _OthersFailed:
    """The all-reduce of a job where another rank failed (flag 1)."""

    def all_reduce(self, tensors, op="sum", path="dense"):
        del op, path
        return [tf.ones_like(t) for t in tensors]


class WholeSavesTest(TestCase):
    def test_the_chief_writes_beside_the_path_then_renames(self):
        self.enterContext(install_chief_writes(_Rank(0)))
        folder = tempfile.mkdtemp()
        seen = []
        original = chief_writes._sibling

        def sibling(filepath):
            seen.append(original(filepath))
            self.assertFalse(os.path.exists(filepath))
            return seen[-1]

        self.enterContext(mock.patch.object(chief_writes, "_sibling", sibling))
        model = small_model()
        model.save(os.path.join(folder, "model.keras"))
        model.save_weights(os.path.join(folder, "w.weights.h5"))
        self.assertEqual(
            sorted(os.listdir(folder)), ["model.keras", "w.weights.h5"]
        )
        self.assertEqual([os.path.dirname(s) for s in seen], [folder] * 2)
        loaded = keras.saving.load_model(os.path.join(folder, "model.keras"))
        for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)

    def test_a_failure_elsewhere_leaves_the_earlier_file(self):
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "model.keras")
        model = small_model()
        model.save(path)  # no strategy yet: an earlier, complete save
        earlier = model.get_weights()
        failing = dataclasses.replace(_Rank(0), communicator=_OthersFailed())
        self.enterContext(install_chief_writes(failing))
        model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0)
        with self.assertRaisesRegex(RuntimeError, "failed on another worker"):
            model.save(path)
        self.assertEqual(os.listdir(folder), ["model.keras"])
        loaded = keras.saving.load_model(path).get_weights()
        for a, b in zip(loaded, earlier, strict=True):
            np.testing.assert_array_equal(a, b)


class _Recording(_SumOfOne):
    """`_SumOfOne` (every rank agrees) that records, in `events`, when
    each barrier ran."""

    def __init__(self, events: list) -> None:
        self.events = events

    def all_reduce(self, tensors, op="sum", path="dense"):
        self.events.append("barrier")
        return super().all_reduce(tensors, op, path)


class SaveReturnsAfterTheRenameTest(TestCase):
    """Every rank returns from `model.save` only once the file is in
    place, so any rank can load it next (a rank that returned at the
    first barrier read the file an earlier run had left there)."""

    def _save(self, rank: int, replace=os.replace) -> list:
        events: list = []
        strategy = dataclasses.replace(
            _Rank(rank), communicator=_Recording(events)
        )
        self.enterContext(install_chief_writes(strategy))

        def recorded_replace(src, dst):
            events.append("rename")
            replace(src, dst)

        self.enterContext(
            mock.patch.object(chief_writes.os, "replace", recorded_replace)
        )
        path = os.path.join(tempfile.mkdtemp(), "model.keras")
        small_model().save(path)
        return events

    def test_the_chief_renames_between_two_barriers(self):
        self.assertEqual(self._save(0), ["barrier", "rename", "barrier"])

    def test_another_rank_waits_at_both_barriers(self):
        self.assertEqual(self._save(1), ["barrier", "barrier"])

    def test_a_failed_rename_fails_the_save(self):
        def failing(src, dst):
            raise PermissionError(f"cannot write {dst}")

        with self.assertRaisesRegex(PermissionError, "cannot write"):
            self._save(0, replace=failing)
