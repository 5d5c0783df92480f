"""`examples/elastic/measure_commit.py` end to end with tiny flags: one
round of a run without commits and one per file store, on 2 elastic
workers each (the figures themselves are tested in
test_commit_figures.py)."""

import json
import re
import sys

import pytest

from tests.examples.main_test_case import run_example


@pytest.mark.multiprocess
def test_one_round_prints_each_stores_share_and_verdict():
    out = run_example(
        [
            *(sys.executable, "-m", "examples.elastic.measure_commit"),
            *("--hidden=16", "--vocab=200", "--embedding_dim=4"),
            *("--steps=30", "--repeats=1", "--stores=directory,served"),
            *("--recovery=false", "--timeout=240"),
        ],
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout[: out.stdout.index("\ncommit cost at")])
    costs = {c["store"]: c for c in report["commit_cost"]}
    assert sorted(costs) == ["directory", "served"]
    for cost in costs.values():
        assert cost["rounds"] == 1 and cost["interval"] == 10
        assert len(cost["window_profile"]) == 10
        assert cost["share_windows"]["n"] == 1
    for store in ("directory", "served"):
        assert re.search(
            rf"^{store} +[+-]\d+\.\d% \[.*<= 5% (holds|does NOT hold)",
            out.stdout,
            re.MULTILINE,
        ), out.stdout[-2000:]
    assert "windows on the runs without commits:" in out.stdout
