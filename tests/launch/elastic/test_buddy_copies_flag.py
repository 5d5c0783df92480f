"""`--buddy-copies`: checked before any worker starts, and given to every
worker of a buddy-store job."""

import json
import subprocess
import sys

import pytest

from keras_hybrid.launch.elastic.commit_store import check_buddy_copies

pytestmark = pytest.mark.multiprocess

CLI = [sys.executable, "-m", "keras_hybrid.run"]


def test_two_copies_need_the_buddy_store():
    check_buddy_copies(2, "buddy")
    check_buddy_copies(1, None)
    with pytest.raises(ValueError, match=r"--buddy-copies is for the buddy"):
        check_buddy_copies(2, "served")
    with pytest.raises(ValueError, match=r"with --commit-store unset"):
        check_buddy_copies(2, None)
    with pytest.raises(ValueError, match=r"at least 1. Received: .* 0"):
        check_buddy_copies(0, "buddy")


def test_the_workers_are_told_the_count(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    worker = (
        "import json, os\n"
        "print(json.dumps(os.environ['KERAS_HYBRID_ELASTIC_BUDDY_COPIES']))\n"
    )
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--host-discovery-script", str(script)]
        + ["--commit-store", "buddy", "--buddy-copies", "2"]
        + [sys.executable, "-c", worker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    counts = [
        json.loads(line.partition("] ")[2]) for line in proc.stdout.splitlines()
    ]
    assert counts == ["2", "2"]


def test_the_cli_refuses_copies_without_the_buddy_store(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--host-discovery-script", str(script)]
        + ["--buddy-copies", "2", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--buddy-copies is for the buddy store" in proc.stderr
    assert "started" not in proc.stderr
