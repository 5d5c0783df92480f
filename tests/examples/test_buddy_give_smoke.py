"""`examples/elastic/buddy_give.py` end to end with tiny flags: both ways
of giving a buddy copy are timed side by side and printed."""

import re
import sys

from tests.examples.main_test_case import run_example


def test_both_ways_are_timed():
    out = run_example(
        [
            *(sys.executable, "-m", "examples.elastic.buddy_give"),
            *("--rows=300", "--dim=4", "--repeats=3"),
        ],
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "blob: 0.0 MB, 3 copies each way" in out.stdout
    for way in ("mapped", "streamed"):
        assert re.search(
            rf"^{way} +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d$",
            out.stdout,
            re.MULTILINE,
        ), out.stdout
    assert re.search(r"own copy into its buffer: \d+\.\d\d ms", out.stdout)
