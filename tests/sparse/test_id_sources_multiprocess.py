"""Every id source on every exchange path: a generated matrix.

Ids come from `StringLookup`, `IntegerLookup`, `Hashing`, a raw
`tf.lookup.StaticHashTable`, `tf.strings.to_hash_bucket_fast` in the model
and in `tf.data.map`, inputs of unknown batch size and length, masked ids
(`mask_zero=True`, the mask flowing into the pooling), ids cast from
float and a ragged input made dense with `to_tensor()`
(`workers/id_sources.py`). Each feeds partitioned tables in a pooled
sequence model, a two-tower `Dot` model and a subclassed model, trained
on N workers with the fused exchange, with one exchange per lookup, and
(4 workers on 2 emulated hosts) with the hierarchical exchange; each must
equal one process on the same global batches (1e-5 for SGD, 1e-4 for
Adam in float32).

The default suite runs a short matrix; `KERAS_HYBRID_ID_MATRIX=full`
runs every source x shape on 2, 3 and 4 workers on every path
(`make test-id-sources`).
"""

import functools
import itertools
import json
import os
import sys
import tempfile

import keras
import numpy as np
import pytest

from keras_hybrid.comm.host_groups import HOSTS_ENV
from keras_hybrid.testing import run_workers
from keras_hybrid.testing.multiprocess import engines_under_test

HERE = os.path.join(os.path.dirname(__file__), "workers")
sys.path.insert(0, HERE)
import id_sources as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess
MATRIX_ENV = "KERAS_HYBRID_ID_MATRIX"
ATOL = {"sgd": 1e-5, "adam": 1e-4}
# Paths: (workers, fused exchange, hierarchical exchange).
PATHS = (
    (2, True, False),
    (2, False, False),
    (3, True, False),
    (3, False, False),
    (4, True, False),
    (4, False, False),
    (4, True, True),
)


def _full_cases() -> list:
    """Every source x shape, the optimizer alternating."""
    combos = itertools.product(cases.SOURCES, cases.SHAPES)
    return [
        (source, shape, cases.OPTIMIZERS[i % 2])
        for i, (source, shape) in enumerate(combos)
    ]


def _short_cases(path) -> list:
    """Every source once on 2 fused workers; a few elsewhere."""
    if path == (2, True, False):
        return [
            (source, cases.SHAPES[i % 3], cases.OPTIMIZERS[i % 2])
            for i, source in enumerate(cases.SOURCES)
        ]
    if path == (2, False, False):
        return [
            ("string_lookup", "two_tower", "adam"),
            ("hash_bucket_in_data", "pooled", "sgd"),
        ]
    if path == (3, True, False):
        return [
            ("integer_lookup", "subclassed", "sgd"),
            ("ragged", "two_tower", "adam"),
        ]
    if path == (4, True, True):
        return [
            ("string_lookup", "pooled", "adam"),
            ("masked", "two_tower", "sgd"),
        ]
    return []


def matrix() -> list:
    """`(path, case)` pairs the suite runs."""
    full = os.environ.get(MATRIX_ENV) == "full"
    return [
        (path, case)
        for path in PATHS
        for case in (_full_cases() if full else _short_cases(path))
    ]


@functools.cache
def launch(engine: str, path: tuple) -> dict:
    workers, fused, hierarchical = path
    todo = [case for p, case in matrix() if p == path]
    env = {}
    if hierarchical:
        env[HOSTS_ENV] = ",".join(["a", "b"] * (workers // 2))
    run = run_workers(
        os.path.join(HERE, "id_sources_worker.py"),
        workers,
        tempfile.mkdtemp(prefix=f"id_sources_{workers}_"),
        args=(
            f"--cases={json.dumps(todo)}",
            f"--fused={fused}",
            f"--hierarchical={hierarchical}",
        ),
        timeout=120 + 60 * len(todo),
        env=env,
        engine=engine,
    ).check()
    assert sorted(run.results) == list(range(workers))
    return run.results


def _id(param) -> str:
    if isinstance(param, tuple) and isinstance(param[0], int):
        workers, fused, hier = param
        kind = "hier" if hier else "fused" if fused else "per_lookup"
        return f"{workers}w-{kind}"
    return "/".join(param) if isinstance(param, tuple) else str(param)


# The Horovod engine's exchange is flat (docs/horovod.md): no
# hierarchical path there.
PARAMS = [
    (engine, path, case)
    for engine in engines_under_test()
    for path, case in matrix()
    if not (engine == "horovod" and path[2])
]


@pytest.mark.parametrize("engine,path,case", PARAMS, ids=_id)
def test_equals_one_process(engine, path, case):
    source, shape, opt = case
    results = launch(engine, path)
    key = "/".join(case)
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
        assert got["hierarchical"] == path[2]
        for i, (g, w) in enumerate(zip(got["final"], want, strict=True)):
            np.testing.assert_allclose(
                g,
                w,
                atol=ATOL[opt],
                rtol=0,
                err_msg=f"{key} on {_id(path)}, rank {rank}, weight {i}",
            )
