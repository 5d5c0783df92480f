"""After `close()`, every object any kind of strategy patched is the one
captured before its first `scope()`: one process, multi-worker (twice in
a row), elastic, on the engines under test. The objects are read straight
from Keras (`workers/stock_objects.py`), not from the registry."""

import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from keras_hybrid.patches import registry
from keras_hybrid.testing import run_workers
from keras_hybrid.testing.multiprocess import engines_under_test

HERE = os.path.join(os.path.dirname(__file__), "workers")
WORKER = os.path.join(HERE, "close_worker.py")
sys.path.insert(0, HERE)
from stock_objects import ELASTIC_ONLY  # noqa: E402
from stock_objects import stock_objects  # noqa: E402

pytestmark = pytest.mark.multiprocess
EVERY = sorted(stock_objects())
MULTI_WORKER = sorted(set(EVERY) - set(ELASTIC_ONLY))
ONE_PROCESS = sorted(
    patch.name
    for patch_set in registry.SETS
    if patch_set.one_process
    for patch in patch_set.patches
)
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _check(results: dict, num_workers: int, patched: list, watchdog: bool):
    assert sorted(results) == list(range(num_workers))
    for rank, attempts in results.items():
        for i, attempt in enumerate(attempts):
            where = f"rank {rank}, strategy {i}"
            assert attempt["size"] == num_workers, where
            assert attempt["theirs"], where
            if i % 2:
                # `with strategy:` does not enter `scope()`: on several
                # workers, `fit` of a model built outside it warns.
                warned = [
                    m
                    for m in attempt["warned"]
                    if "built outside `strategy.scope()`" in m
                ]
                assert len(warned) == (num_workers > 1), where
            assert attempt["unused"] == [], where
            assert attempt["inside"] == patched, where
            assert attempt["after"] == [], where
            assert attempt["watchdog_inside"] is watchdog, where
            assert not attempt["watchdog_after"], where


def _read(out_dir: str, num_workers: int) -> dict:
    results = {}
    for rank in range(num_workers):
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "rb") as f:
            results[rank] = pickle.load(f)
    return results


def test_the_registry_patches_what_this_list_reads_from_keras():
    assert sorted(registry.sites()) == EVERY
    assert sorted(registry.sites(elastic=False)) == MULTI_WORKER


@pytest.mark.timeout(200)
def test_one_process_patches_only_the_build():
    # The second strategy is used as `with strategy:`.
    out_dir = tempfile.mkdtemp(prefix="close_one_")
    proc = subprocess.run(
        [sys.executable, WORKER, f"--out_dir={out_dir}", "--attempts=2"],
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check(_read(out_dir, 1), 1, ONE_PROCESS, watchdog=False)


@pytest.mark.parametrize("engine", engines_under_test())
def test_multi_worker_strategies_restore_every_patch(engine):
    run = run_workers(
        WORKER,
        2,
        tempfile.mkdtemp(prefix=f"close_{engine}_"),
        args=("--attempts=2",),
        timeout=300,
        engine=engine,
    ).check()
    _check(run.results, 2, MULTI_WORKER, watchdog=engine == "tf")
    # Both strategies trained in sync.
    for attempt in range(2):
        for a, b in zip(
            run.results[0][attempt]["weights"],
            run.results[1][attempt]["weights"],
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)


@pytest.mark.timeout(300)
def test_elastic_strategy_restores_every_patch():
    # A steady elastic job (2 workers, bounds 2..2): its strategy also
    # installs the elastic patches (loss scaled by the current size, a
    # `fit` that resizes and recovers), on top of the multi-worker ones,
    # patching `Model.fit` and `scale_loss_for_distribution` twice.
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "hosts.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho localhost:2\n")
        os.chmod(script, 0o755)
        out_dir = os.path.join(tmp, "out")
        os.makedirs(out_dir)
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "keras_hybrid.run"),
                *("--min-np", "2", "--max-np", "2", "--threads", "1"),
                *("--host-discovery-script", script),
                *(sys.executable, WORKER, f"--out_dir={out_dir}"),
            ],
            capture_output=True,
            text=True,
            timeout=280,
            env=ENV,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        results = _read(out_dir, 2)
    _check(results, 2, EVERY, watchdog=True)
