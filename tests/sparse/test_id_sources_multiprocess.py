"""Every id source on every exchange path: a generated matrix.

Ids come from `StringLookup`, `IntegerLookup`, `Hashing`, a raw
`tf.lookup.StaticHashTable`, `tf.strings.to_hash_bucket_fast` in the model
and in `tf.data.map`, inputs of unknown batch size and length, masked ids
(`mask_zero=True`, the mask flowing into the pooling), ids cast from
float and a ragged input made dense with `to_tensor()`
(`workers/id_sources.py`). Each feeds partitioned tables in a pooled
sequence model, a two-tower `Dot` model and a subclassed model, trained
on N workers with the fused exchange, with one exchange per lookup, and
(4 workers, 2 on each of 2 emulated hosts) with the hierarchical
exchange; each must equal one process on the same global batches (1e-5
for SGD, 1e-4 for Adam in float32). One scenario per worker count, on
the shared pool (`workers/id_sources_scenarios.py`), trains its cases.

The default suite runs a short matrix (every source once, each path and
worker count a few times); `KERAS_HYBRID_ID_MATRIX=full` runs every
source x shape x path on 2, 3 and 4 workers (`make test-id-sources`).
"""

import functools
import itertools
import os
import sys

import keras
import numpy as np
import pytest

from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario
from keras_hybrid.testing.pool import shared_pool

HERE = os.path.join(os.path.dirname(__file__), "workers")
sys.path.insert(0, HERE)
import id_sources as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess
MATRIX_ENV = "KERAS_HYBRID_ID_MATRIX"
ATOL = {"sgd": 1e-5, "adam": 1e-4}
WORKER_COUNTS = (2, 3, 4)


def _paths(workers: int) -> tuple:
    # The hierarchical exchange needs as many workers on each of 2 hosts,
    # and at least 2 on each: with one per host it is the flat exchange.
    if workers % 2 or workers < 4:
        return ("fused", "per_lookup")
    return cases.PATH_KINDS


def _full() -> list:
    """Every source x shape x path, the optimizer alternating."""
    return [
        (workers, (source, shape, cases.OPTIMIZERS[i % 2], path))
        for workers in WORKER_COUNTS
        for path in _paths(workers)
        for i, (source, shape) in enumerate(
            itertools.product(cases.SOURCES, cases.SHAPES)
        )
    ]


def _short() -> list:
    """Every source once on 2 fused workers; a few more on each path."""
    every = [
        (2, (source, cases.SHAPES[i % 3], cases.OPTIMIZERS[i % 2], "fused"))
        for i, source in enumerate(cases.SOURCES)
    ]
    return every + [
        (2, ("string_lookup", "two_tower", "adam", "per_lookup")),
        (2, ("hash_bucket_in_data", "pooled", "sgd", "per_lookup")),
        (3, ("integer_lookup", "subclassed", "sgd", "fused")),
        (3, ("ragged", "two_tower", "adam", "fused")),
        (4, ("string_lookup", "pooled", "adam", "hierarchical")),
        (4, ("masked", "two_tower", "sgd", "hierarchical")),
    ]


def matrix() -> list:
    """`(workers, case)` pairs the suite runs."""
    return _full() if os.environ.get(MATRIX_ENV) == "full" else _short()


def launch(engine: str, workers: int) -> dict:
    """Every rank's results of the one scenario for `workers`; a failed
    scenario fails every case of it, without running again."""
    outcome = _launch(engine, workers)
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


@functools.cache
def _launch(engine: str, workers: int):
    try:
        return _run(engine, workers)
    except AssertionError as error:
        return error


def _run(engine: str, workers: int) -> dict:
    todo = [case for n, case in matrix() if n == workers]
    if engine == "horovod":
        todo = [c for c in todo if c[3] != "hierarchical"]
    run = run_scenario(
        os.path.join(HERE, "id_sources_scenarios.py"),
        "train",
        workers,
        {"cases": todo},
        engine=engine,
        timeout=120 + 60 * len(todo),
    ).check()
    assert sorted(run.results) == list(range(workers))
    if any(
        "error" in r for result in run.results.values() for r in result.values()
    ):
        # A case that failed may have left a collective aborted in the
        # workers: the next scenario gets a fresh launch.
        shared_pool(workers, engine).close()
    return run.results


def _id(param) -> str:
    if isinstance(param, int):
        return f"{param}w"
    return "/".join(param) if isinstance(param, tuple) else str(param)


# The Horovod engine's exchange is flat (docs/horovod.md): no
# hierarchical path there.
PARAMS = [
    (engine, workers, case)
    for engine in engines_under_test()
    for workers, case in matrix()
    if not (engine == "horovod" and case[3] == "hierarchical")
]


@pytest.mark.parametrize("engine,workers,case", PARAMS, ids=_id)
def test_equals_one_process(engine, workers, case):
    source, shape, opt, path = case
    results = launch(engine, workers)
    key = "/".join(case)
    for rank, result in results.items():
        assert "error" not in result[key], (
            f"{key} on {workers} workers, rank {rank}:\n{result[key]['error']}"
        )
    initial = results[0][key]["initial"]
    keras.backend.clear_session()
    want = cases.reference(source, shape, opt, initial)
    moved = max(
        float(np.abs(w - i).max()) for w, i in zip(want, initial, strict=True)
    )
    assert moved > 1e-3, "no training"
    for rank, result in results.items():
        got = result[key]
        assert set(got["kinds"].values()) == {"sparse"}, got["kinds"]
        assert got["hierarchical"] == (path == "hierarchical")
        for i, (g, w) in enumerate(zip(got["final"], want, strict=True)):
            np.testing.assert_allclose(
                g,
                w,
                atol=ATOL[opt],
                rtol=0,
                err_msg=f"{key} on {workers} workers, rank {rank}, weight {i}",
            )
