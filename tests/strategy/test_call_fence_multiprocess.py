"""`predict` on every rank, the call fence and TensorBoard on real workers.

`predict` on 2 and 3 workers (with a TensorBoard `fit`) runs on the
shared pool; three launches of their own: the fence's errors with every
rank catching them (and one rank exiting), the uncaught Horovod-style
script, and a rank-0-only read in a `fit` callback.
"""

import glob
import os
import re
import sys
import tempfile
import time

import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid.testing import run_workers
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
WORKER = os.path.join(HERE, "call_fence_worker.py")
sys.path.insert(0, HERE)
import call_cases  # noqa: E402

pytestmark = pytest.mark.multiprocess
TIMEOUT = 30  # HybridStrategy timeout_seconds of the workers
ADVICE = r"on every worker.*docs/migrating.md"


def _launch(phase, num_workers=2, timeout=300):
    target = tempfile.mkdtemp(prefix=f"fence_{phase}_")
    run = run_workers(
        WORKER,
        num_workers,
        tempfile.mkdtemp(prefix=f"fence_{phase}_out_"),
        args=(f"--phase={phase}", f"--dir={target}", f"--timeout={TIMEOUT}"),
        timeout=timeout,
    )
    return run, target


def _predict_on_pool(num_workers):
    target = tempfile.mkdtemp(prefix="fence_predict_")
    run = run_scenario(
        os.path.join(HERE, "call_cases.py"),
        "on_workers",
        num_workers,
        {"folder": target},
    )
    return run, target


def _assert_predictions_match_one_process(results):
    for shape in call_cases.SHAPES:
        model = call_cases.build_model(shape)
        model.set_weights(results[0][f"{shape}_weights"])
        want = call_cases.predictions(model)
        for rank, result in results.items():
            for how, expected in want.items():
                got = result[shape][how]
                tf.nest.assert_same_structure(got, expected)
                for g, e in zip(
                    tf.nest.flatten(got), tf.nest.flatten(expected), strict=True
                ):
                    assert g.shape == e.shape, (rank, shape, how)
                    np.testing.assert_allclose(
                        g, e, atol=1e-6, rtol=0, err_msg=f"{rank} {shape} {how}"
                    )


def _epoch_scalars(event_file) -> set:
    tags = set()
    for record in tf.data.TFRecordDataset(event_file):
        event = tf.compat.v1.Event.FromString(record.numpy())
        tags.update(v.tag for v in event.summary.value)
    return tags


def test_predict_on_two_workers_and_tensorboard_on_the_chief():
    run, target = _predict_on_pool(2)
    results = run.check().results
    assert all(all(r["partitioned"]) for r in results.values())
    _assert_predictions_match_one_process(results)
    # The deprecated gather no longer duplicates rows.
    assert len(results[1]["deprecated"]) == call_cases.ROWS
    assert "gather_predictions` is deprecated" in run.stderr
    events = glob.glob(os.path.join(target, "logs", "**", "*tfevents*"))
    assert events, os.listdir(target)
    # events.out.tfevents.<time>.<host>.<pid>.<n>.v2
    pids = {os.path.basename(f).rsplit(".", 3)[1] for f in events}
    assert pids == {str(results[0]["pid"])}
    assert "epoch_loss" in _epoch_scalars(
        [f for f in events if "train" in f][0]
    )


def test_predict_on_three_workers_with_an_empty_slice():
    # The last global batch (2 rows) leaves rank 0 with none.
    results = _predict_on_pool(3)[0].check().results
    _assert_predictions_match_one_process(results)


def test_different_calls_and_lone_calls_raise_on_every_rank():
    run, _ = _launch("fence", 2)
    results = run.check().results  # every rank caught and exited cleanly
    for result in results.values():
        for case, calls in (
            ("get_weights_vs_save", "model.get_weights.*model.save"),
            ("predict_vs_evaluate", "model.predict.*model.evaluate"),
            ("numpy_vs_layer", "variable.numpy.*layer.get_weights"),
        ):
            assert result[case] is not None, case
            pattern = rf"different collective calls: rank 0 called {calls}"
            assert _matches(pattern + ".*" + ADVICE, result[case]), result
        # Collectives work after a mismatch; inner calls fence once.
        assert result["counts"] == {
            "save": 1,
            "save_weights": 1,
            "fit": 1,
            "checkpoint": 1,
        }
        for a, b in zip(result["weights"], results[0]["weights"], strict=True):
            np.testing.assert_array_equal(a, b)
    chief = results[0]
    assert _matches(
        r"rank 0 called model.predict, rank 1 did not call it within 30 s"
        + ".*"
        + ADVICE,
        chief["lone_alive"],
    )
    assert TIMEOUT - 1 < chief["lone_alive_seconds"] < TIMEOUT + 15
    assert _matches(
        r"rank 0 called model.get_weights, rank 1 has exited",
        chief["lone_exited"],
    )
    assert chief["lone_exited_seconds"] < TIMEOUT


def test_rank0_only_script_fails_with_the_fence_error_on_every_rank():
    # The `if rank == 0:` idiom of Horovod scripts, on the TF engine.
    start = time.monotonic()
    run, _ = _launch("uncaught", 2)
    assert run.returncode != 0
    for rank in (0, 1):
        assert (
            f"[{rank}] RuntimeError: Workers made different collective "
            "calls: rank 0 called model.get_weights, rank 1 called "
            "model.save" in run.stderr
        ), run.stderr[-3000:]
    assert "broadcast" not in run.stderr
    assert "UnavailableError" not in run.stderr
    assert time.monotonic() - start < 120


def test_a_read_on_rank0_only_inside_fit_names_the_call():
    """Inside `fit` a callback's read is not fenced: its collective times
    out, and the error says which call and why. The message is logged
    before it is raised: TensorFlow may segfault after the timed-out
    collective while Python prints the traceback (seen once under load)."""
    start = time.monotonic()
    run, _ = _launch("in_fit", 2)
    assert run.returncode != 0
    what = (
        r"model.get_weights failed on rank 0 inside "
        r"model.fit \(DeadlineExceededError\).*" + ADVICE
    )
    assert _matches(r"\[0\] E.*keras-hybrid: " + what, run.stderr), run.stderr[
        -3000:
    ]
    assert time.monotonic() - start < 4 * TIMEOUT + 120


def _matches(pattern, text) -> bool:
    return text is not None and re.search(pattern, text, re.S) is not None
