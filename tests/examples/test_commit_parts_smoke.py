"""`examples/elastic/commit_parts.py` end to end with tiny flags: every
part of one commit is timed and printed."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
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
    out = subprocess.run(
        [
            *(sys.executable, "-m", "examples.elastic.commit_parts"),
            *("--rows=300", "--dim=4", "--repeats=2", f"--root={tmp_path}"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=ROOT,
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
