import unittest
from unittest import mock

import pytest

from keras_hybrid.launch import devices

pytestmark = pytest.mark.timeout(30)


class VisibleDeviceTest(unittest.TestCase):
    def test_picks_entry_of_parent_list(self):
        self.assertEqual(devices.visible_device(0, "4,5,6", 0), "4")
        self.assertEqual(devices.visible_device(2, "4, 5, 6", 0), "6")

    def test_parent_list_wins_over_nvidia_smi(self):
        self.assertEqual(devices.visible_device(1, "7,3", 8), "3")

    def test_uses_gpu_index_when_parent_unset(self):
        self.assertEqual(devices.visible_device(1, None, 2), "1")

    def test_no_gpus_leaves_unset(self):
        self.assertIsNone(devices.visible_device(3, None, 0))

    def test_hidden_gpus_stay_hidden(self):
        self.assertEqual(devices.visible_device(2, "", 4), "")
        self.assertEqual(devices.visible_device(2, "-1", 4), "-1")

    def test_more_workers_than_listed_devices(self):
        with self.assertRaisesRegex(
            ValueError,
            r"CUDA_VISIBLE_DEVICES='0,1'\. Received: local_rank=2\. Start "
            r"at most 2 worker\(s\) per host",
        ):
            devices.visible_device(2, "0,1", 0)

    def test_more_workers_than_gpus(self):
        with self.assertRaisesRegex(
            ValueError, r"nvidia-smi lists 1 GPU\(s\)\. Received: local_rank=1"
        ):
            devices.visible_device(1, None, 1)


class DetectGpuCountTest(unittest.TestCase):
    def test_zero_without_nvidia_smi(self):
        with mock.patch.object(devices.shutil, "which", return_value=None):
            self.assertEqual(devices.detect_gpu_count(), 0)

    def test_counts_listed_gpus(self):
        listing = "GPU 0: A100 (UUID: x)\nGPU 1: A100 (UUID: y)\n"
        completed = mock.Mock(stdout=listing)
        with (
            mock.patch.object(devices.shutil, "which", return_value="/x"),
            mock.patch.object(
                devices.subprocess, "run", return_value=completed
            ),
        ):
            self.assertEqual(devices.detect_gpu_count(), 2)
