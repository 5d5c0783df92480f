"""The Python API `keras_hybrid.launch.launch`."""

import signal
import sys
import unittest

import pytest

from keras_hybrid.launch import launch
from tests.launch.launch_testing import lines_by_rank

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(60)]


def test_launch_forwards_prefixed_output(tmp_path, capsys):
    script = tmp_path / "hello.py"
    script.write_text(
        "import os\nprint('rank', os.environ['KERAS_HYBRID_RANK'])\n"
    )
    before = signal.getsignal(signal.SIGTERM)
    code = launch([sys.executable, script], 2, env={"A": "1"}, timeout=30)
    assert code == 0
    assert lines_by_rank(capsys.readouterr().out) == {
        0: ["rank 0"],
        1: ["rank 1"],
    }
    # The launcher's handlers are gone once the job ends.
    assert signal.getsignal(signal.SIGTERM) is before


def test_launch_returns_failed_rank_code(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import sys\nsys.exit(7)\n")
    assert launch([sys.executable, script], 1, timeout=30) == 7


class LaunchValidationTest(unittest.TestCase):
    def test_rejects_bad_num_processes(self):
        with self.assertRaisesRegex(ValueError, r"Received: -np 0\."):
            launch(["python"], 0)

    def test_rejects_negative_timeout(self):
        with self.assertRaisesRegex(ValueError, r"Received: --timeout -1\."):
            launch(["python"], 1, timeout=-1)

    def test_rejects_empty_command(self):
        with self.assertRaisesRegex(ValueError, r"command to run is required"):
            launch([], 1)

    def test_rejects_bad_hosts(self):
        with self.assertRaisesRegex(ValueError, r"slots in 'h1:0' are < 1"):
            launch(["python"], hosts="h1:0")
