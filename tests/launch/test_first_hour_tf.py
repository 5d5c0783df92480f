"""What a new user sees of a TensorFlow job through `keras-hybrid-run`:
the library's INFO lines in a plain script, Keras' bar as one line per
epoch, no TensorFlow banners, and a bad id named with its worker whether
the table is partitioned or replicated."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.tensorflow,
    pytest.mark.timeout(600),
]

WORKERS = os.path.join(os.path.dirname(__file__), "workers")


def cli(*args):
    environ = dict(os.environ)
    environ.pop("KERAS_HYBRID_CONSOLE_RANKS", None)
    environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-m", "keras_hybrid.run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )


def test_plain_script_console_and_log_files(tmp_path):
    script = os.path.join(WORKERS, "plain_fit_script.py")
    result = cli("-np", 2, "--threads", 1, "--log-dir", tmp_path, script)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.splitlines()
    epochs = [line for line in out if re.match(r"\[0\] 4/4 - \d+s - ", line)]
    assert len(epochs) == 2, result.stdout
    assert all(line.startswith("[0] ") for line in out), result.stdout
    assert "\b" not in result.stdout and "\x1b" not in result.stdout
    err = result.stderr
    assert re.search(r"\[0\] I\d{4} .*\] Routing plan:", err), err[-3000:]
    assert "[0] sparse" in err
    assert "keras-hybrid: item/embeddings is partitioned over 2" in err
    assert not re.search(r"^\[1\] I\d{4}", err, re.M), err[-3000:]
    assert "oneDNN" not in err and "absl::InitializeLog" not in err
    rank1 = (tmp_path / "rank.1.log").read_text()
    assert "item/embeddings is partitioned over 2" in rank1
    assert "oneDNN" in rank1
    rank0 = (tmp_path / "rank.0.log").read_text()
    assert len(re.findall(r"^4/4 - \d+s - ", rank0, re.M)) == 2, rank0


def test_quiet_hides_the_library_info_lines():
    script = os.path.join(WORKERS, "plain_fit_script.py")
    result = cli("-np", 2, "--threads", 1, "--quiet", script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not re.search(r"^\[\d\] I\d{4}", result.stderr, re.M)
    assert "keras-hybrid-run:" not in result.stderr


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_bad_id_names_the_worker_and_the_range(kind):
    script = os.path.join(WORKERS, "bad_id_script.py")
    result = cli("-np", 3, "--threads", 1, script, kind)
    assert result.returncode == 1
    kind_name = "Partitioned table" if kind == "sparse" else "Table"
    replicated = "" if kind == "sparse" else " (replicated)"
    lines = result.stderr.splitlines()
    started = [line for line in lines if "the failure started" in line]
    assert started == [
        "keras-hybrid-run: the failure started on rank 2: "
        f"InvalidArgumentError: {kind_name} 'item/embeddings'{replicated} "
        "was looked up with id 1005 on worker 2; valid ids are [0, 1000)."
    ], "\n".join(lines[-12:])
    assert lines.index(started[0]) >= len(lines) - 5


def test_elastic_min_np_1_trains_on_after_losing_the_other_worker(tmp_path):
    hosts = tmp_path / "hosts.sh"
    hosts.write_text("#!/bin/sh\necho localhost:2\n")
    hosts.chmod(0o755)
    main = os.path.join(
        os.path.dirname(os.path.dirname(WORKERS)),
        os.pardir,
        "examples",
        "elastic",
        "main.py",
    )
    result = cli(
        *("-np", 2, "--min-np", 1, "--max-np", 2, "--threads", 1),
        *("--elastic-timeout", 2, "--host-discovery-script", hosts),
        os.path.normpath(main),
        *("--epochs=2", "--num_samples=960", "--hidden=32"),
        *("--step_sleep=0.05", "--die_at_step=12"),
        f"--report={tmp_path / 'report.json'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr
    assert "rank 1 (task 1) exited with code -9" in err, err[-3000:]
    assert "task 0 recovered as rank 0 of 1" in err, err[-3000:]
    assert re.search(r"^\[0\] .*step \d+: rank 0 of 1$", err, re.M), err[-3000:]
