"""`make demo` prints the losses README quotes: the quickstart is seeded."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]


def test_demo_prints_the_losses_readme_quotes():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        quoted = re.search(
            r"^3 worker\(s\); global loss per epoch: .*$", f.read(), re.M
        )
    assert quoted, "README quotes no demo losses"
    # The Makefile's demo command.
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        demo = re.search(r"^demo:.*\n\t(.*)$", f.read(), re.M).group(1)
    assert "-np 3" in demo and "examples/quickstart/main.py --epochs=5" in demo
    result = subprocess.run(
        [sys.executable, "-m", "keras_hybrid.run", "-np", "3", "--threads", "1"]
        + [
            os.path.join(ROOT, "examples", "quickstart", "main.py"),
            "--epochs=5",
        ],
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert quoted.group(0) in result.stderr, result.stderr[-3000:]
