"""`examples/elastic/commit_parts.py` end to end with tiny flags: every
part of one commit is timed and printed."""

import os
import re
import sys

from tests.examples.main_test_case import run_example

PARTS = [
    "training: read, copy-on-read",
    "training: numpy copy into new arrays",
    "training: read, shared",
    "training: numpy copy into reused arrays",
    "directory writer: a new file, removal",
    "directory writer: over the spare",
    "served writer: send the blob",
    "server: receive into one buffer alone",
    "server: receive into a new file, removal",
    "server: receive over the spare, one buffer",
    "server: receive over the spare, spliced",
]


def test_every_part_is_timed(tmp_path):
    out = run_example(
        [
            *(sys.executable, "-m", "examples.elastic.commit_parts"),
            *("--rows=300", "--dim=4", "--repeats=2", f"--root={tmp_path}"),
        ],
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "one commit of 0.0 MB (3 arrays of 300 x 4 float32)" in out.stdout
    for part in PARTS:
        assert re.search(
            rf"^{re.escape(part)}.* \d+\.\d\d ms +\d+ faults$",
            out.stdout,
            re.MULTILINE,
        ), out.stdout
    assert os.listdir(tmp_path) == []  # its folders are gone
