"""`python -m keras_hybrid.benchmark --help` lists the tool's own flags and
exits 0, without TensorFlow's banners."""

import os
import subprocess
import sys


def test_help_lists_own_flags_and_exits_0():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    result = subprocess.run(
        [sys.executable, "-m", "keras_hybrid.benchmark", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "  --workload: " in result.stdout
    assert "  --modes: " in result.stdout
    assert "Try --helpfull" not in result.stdout
