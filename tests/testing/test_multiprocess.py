"""`run_workers` turns a hang into a failure and leaves no worker behind."""

import os
import tempfile
import textwrap
import unittest

import pytest

from keras_hybrid.testing import multiprocess
from tests.launch.launch_testing import wait_gone

pytestmark = pytest.mark.multiprocess

# A worker that writes its pid and then never finishes.
_HANGING_WORKER = textwrap.dedent(
    """
    import os, sys, time
    out = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--out_dir=")]
    rank = os.environ.get("KERAS_HYBRID_RANK", str(os.getpid()))
    with open(os.path.join(out[0], f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
    """
)


class RunWorkersTimeoutTest(unittest.TestCase):
    def test_timeout_stops_the_workers(self):
        with tempfile.TemporaryDirectory() as out_dir:
            script = os.path.join(out_dir, "hang.py")
            with open(script, "w") as f:
                f.write(_HANGING_WORKER)
            with self.assertRaisesRegex(AssertionError, "did not finish"):
                multiprocess.run_workers(script, 2, out_dir, timeout=8)
            pids = [
                int(open(os.path.join(out_dir, name)).read())
                for name in os.listdir(out_dir)
                if name.startswith("pid")
            ]
            self.assertEqual(len(pids), 2)
            self.assertEqual(wait_gone(pids, seconds=10), [])


if __name__ == "__main__":
    unittest.main()
