"""`examples/elastic/commit_figures.py`: the figures of `measure_commit.py`
on step end times made by hand."""

import numpy as np
import pytest

from examples.elastic import commit_figures as figures


def _ends(gaps) -> np.ndarray:
    """Step ends whose gaps after the warm-up are `gaps`: the warm-up
    steps take 1 s each, the gap before the first counted one too."""
    head = np.arange(figures.WARMUP + 1, dtype=float)
    return np.concatenate([head, head[-1] + np.cumsum(gaps)])


def _with_commits(steps: int, interval: int, step: float, extra: float):
    """Gaps of `step` s, `extra` s more in the one after each commit."""
    place = figures.positions(steps, interval)
    return step + extra * (place == 0)


def test_positions_start_at_the_step_after_the_warm_up():
    # The first counted gap starts at the end of global step WARMUP + 1.
    assert figures.WARMUP == 5
    assert figures.positions(6, 10).tolist() == [6, 7, 8, 9, 0, 1]


def test_a_commit_of_half_a_step_every_10_steps_is_5_percent():
    ends = _ends(_with_commits(100, 10, step=0.04, extra=0.02))
    assert figures.window_share(ends, 10) == pytest.approx(0.05)
    profile = figures.window_profile(ends, 10)
    assert profile == pytest.approx([1.5] + [1.0] * 9)
    # Against a run without commits of 0.04 s steps.
    never = _ends(np.full(100, 0.04))
    (share,) = figures.paired_shares([ends], [never])
    assert share == pytest.approx(0.05)
    assert figures.window_share(never, 10) == pytest.approx(0.0)


def test_only_whole_windows_count():
    # 16 gaps: the 6 after the first 10 are left out, and with them the
    # second commit's extra time.
    assert figures.positions(16, 10)[10:].tolist() == [6, 7, 8, 9, 0, 1]
    ends = _ends(_with_commits(16, 10, step=1.0, extra=1.0))
    assert figures.window_share(ends, 10) == pytest.approx(0.1)


def test_mean_and_median_steps_leave_out_the_warm_up():
    ends = _ends([1.0, 2.0, 6.0])
    assert figures.mean_step(ends) == pytest.approx(3.0)
    assert figures.median_step(ends) == pytest.approx(2.0)


def test_spread():
    assert figures.spread([0.3, -0.1, 0.05]) == {
        "median": 0.05,
        "min": -0.1,
        "max": 0.3,
        "n": 3,
    }


def test_an_interval_without_quiet_steps_is_an_error():
    with pytest.raises(ValueError, match="interval >= 6"):
        figures.window_share(_ends(np.ones(20)), 4)
