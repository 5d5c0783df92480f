"""Examples run end to end with tiny flags: alone and on 2 workers."""

import sys

import pytest

from tests.examples.main_test_case import run_example

QUICKSTART = [
    "examples/quickstart/main.py",
    "--epochs=2",
    "--num_samples=512",
    "--batch_size=64",
]


def test_quickstart_one_process():
    out = run_example([sys.executable, *QUICKSTART])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "1 worker(s); global loss per epoch:" in out.stderr


@pytest.mark.multiprocess
def test_quickstart_two_workers_like_make_demo():
    launcher = [sys.executable, "-m", "keras_hybrid.run", "-np", "2"]
    out = run_example([*launcher, sys.executable, *QUICKSTART])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 worker(s); global loss per epoch:" in out.stderr
    losses = out.stderr.split("global loss per epoch:")[1].split("\n")[0]
    first, last = (float(v) for v in losses.split(","))
    assert last < first


def test_quickstart_rejects_extra_arguments():
    out = run_example([sys.executable, "examples/quickstart/main.py", "oops"])
    assert out.returncode != 0
    assert "Unexpected arguments" in out.stderr


def test_row_reads_benchmark_trains_the_same_weights_both_ways():
    out = run_example(
        [
            sys.executable,
            "examples/row_reads_benchmark/main.py",
            "--vocab=2000",
            "--dim=8",
            "--steps=5",
            "--rounds=2",
        ]
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(
        x for x in out.stdout.splitlines() if x.startswith("table 2000 x 8")
    )
    assert "whole reads" in line and "row reads" in line
    diff = float(line.rsplit("at most ", 1)[1])
    assert diff < 1e-6, line


def test_fusion_benchmark_prints_both_configurations():
    out = run_example(
        [
            sys.executable,
            "examples/fusion_benchmark/main.py",
            "--steps=5",
            "--layers=2",
            "--width=32",
        ]
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fused/unfused step time:" in out.stderr
