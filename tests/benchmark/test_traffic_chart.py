"""The benchmark's traffic chart shows every path of every mode: bars side
by side (none hidden under another), plain-number ticks, the legend
inside the plot."""

import os
import tempfile
from unittest import mock

import numpy as np
import pytest

from keras_hybrid.benchmark import results

matplotlib = pytest.importorskip("matplotlib")


def _result(mode, samples, **megabytes):
    sizes = {p: 0.0 for p in results.BYTE_PATHS}
    sizes.update(megabytes)
    return {
        "mode": mode,
        "samples_per_sec": samples,
        "bytes_per_step": {p: mb * 1e6 for p, mb in sizes.items()},
        "lower_bound_bytes_per_step": 1.7e6,
    }


REPORT = {
    "workload": "lm",
    "workers": 4,
    "netem": None,
    "results": [
        _result("hybrid", 465, dense=0.447, sparse_pull=0.98, sparse_push=0.5),
        _result("allgather", 250, dense=0.447, sparse_push=4.7),
        _result("dense", 160, dense=118.0),
    ],
}


def test_every_path_is_its_own_visible_bar():
    from matplotlib import pyplot

    figures = []
    with mock.patch.object(pyplot, "close", figures.append):
        path = os.path.join(tempfile.mkdtemp(), "chart.png")
        results.plot(REPORT, path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    (figure,) = figures
    traffic = figure.axes[1]
    bars = [p for p in traffic.patches if p.get_height() > 0]
    # hybrid: 3 paths, allgather: 2, dense: 1; the 0.447 MB dense path is
    # a bar of its own next to the others, not a sliver of a stack.
    assert len(bars) == 6
    assert all(bar.get_y() == 0 for bar in bars)
    low, high = traffic.get_ylim()
    assert low < 0.447 and high > 118
    ticks = [t.get_text() for t in traffic.get_yticklabels() if t.get_text()]
    assert len(ticks) >= 5 and "1" in ticks and "100" in ticks
    legend = traffic.get_legend()
    figure.canvas.draw()
    inside = traffic.get_window_extent()
    box = legend.get_window_extent()
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1
    assert inside.y0 <= box.y0 and box.y1 <= inside.y1
    tallest = max(bar.get_window_extent().y1 for bar in bars)
    assert box.y0 > tallest or np.isclose(box.y0, tallest)
    matplotlib.pyplot.close(figure)
