"""The figures `measure_commit.py` reports, from the step end times of its
runs (pure functions, tested in tests/examples/test_commit_figures.py).

A run's `step_ends` are the wall times at which rank 0 finished each of
its steps; without resizes, `step_ends[i]` ends global step `i + 1`, and
the gap `step_ends[i] - step_ends[i - 1]` is the time from the end of
global step `i` to the end of the next: a commit taken after global step
`i` (every `interval`-th) lands in it or in the next few gaps, while its
background write overlaps the steps.
"""

import numpy as np

# Steps left out at the start of a run (tracing, warm-up).
WARMUP = 5
# Gaps this many steps or more after a commit's step, and before the
# next one's, are quiet: the background write of a 19 MB shard takes
# about two steps.
QUIET_AFTER = 4


def step_gaps(step_ends) -> np.ndarray:
    """The gaps between step ends, after the warm-up; entry `j` is the gap
    that starts at the end of global step `WARMUP + j + 1`."""
    ends = np.asarray(step_ends, dtype=float)
    return np.diff(ends[WARMUP:])


def median_step(step_ends) -> float:
    return float(np.median(step_gaps(step_ends)))


def mean_step(step_ends) -> float:
    return float(np.mean(step_gaps(step_ends)))


def positions(n: int, interval: int) -> np.ndarray:
    """The place of each of `n` gaps (`step_gaps`) in its commit window:
    0 for the gap that starts at the end of a commit's step."""
    return (WARMUP + 1 + np.arange(n)) % interval


def window_profile(step_ends, interval: int) -> np.ndarray:
    """The mean gap at each place of the commit window (`positions`) over
    the mean quiet gap: where in the window a commit's cost lands."""
    gaps = step_gaps(step_ends)
    place = positions(len(gaps), interval)
    quiet = _quiet(gaps, place, interval)
    return np.array(
        [np.mean(gaps[place == p]) / quiet for p in range(interval)]
    )


def window_share(step_ends, interval: int) -> float:
    """Within one run: the mean gap over whole commit windows against the
    mean quiet gap, minus 1 (the run's extra step time caused by commits,
    if the quiet steps are the steps without commits). On a run without
    commits it measures the method's own bias (near 0)."""
    gaps = step_gaps(step_ends)
    whole = len(gaps) - len(gaps) % interval
    place = positions(whole, interval)
    gaps = gaps[:whole]
    return float(np.mean(gaps) / _quiet(gaps, place, interval) - 1.0)


def _quiet(gaps: np.ndarray, place: np.ndarray, interval: int) -> float:
    quiet = (place >= QUIET_AFTER) & (place < interval - 1)
    if not quiet.any():
        raise ValueError(
            f"No quiet steps in a commit window of {interval} steps: "
            f"measure the windows at an interval >= {QUIET_AFTER + 2}."
        )
    return float(np.mean(gaps[quiet]))


def paired_shares(runs: list, baselines: list) -> list:
    """Each run's mean step against that of the run without commits of
    the same round (run one after the other), minus 1."""
    return [
        mean_step(r) / mean_step(b) - 1.0
        for r, b in zip(runs, baselines, strict=True)
    ]


def spread(values) -> dict:
    """Median, smallest and largest of `values`."""
    values = np.asarray(values, dtype=float)
    return {
        "median": float(np.median(values)),
        "min": float(np.min(values)),
        "max": float(np.max(values)),
        "n": int(values.size),
    }
