"""`DynamicEmbedding` on 1, 2 and 4 real workers under `HybridStrategy`,
on each engine under test (`make test-horovod` runs them on Horovod).

Each worker count's pool runs one scenario
(`workers/dynamic_scenarios.py`) that fits {SGD, Adam} x {admit_after 1,
3}, and Adam accumulating gradients over 2 steps (in a
`HybridOptimizer`, admit_after 3), on the same keys (12 steps of global
batch 8, no eviction). Here, plain Keras trains a static Embedding over
the same keys, admitted by the same rule ahead of training
(`reference.admitted_rows`), read one row per distinct key
(dense-gradient semantics, as under the strategy). The losses, every
key's row, the head and the predictions must agree within 1e-5, every
key must live on its owner only, and every worker must hold a table of
its own capacity.
"""

import functools
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_hybrid.dynamic.initial_rows import InitialRows
from keras_hybrid.dynamic.key_owners import KeyOwners
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario
from tests.dynamic import reference

HERE = os.path.join(os.path.dirname(__file__), "workers")
SCENARIO = os.path.join(HERE, "dynamic_scenarios.py")
sys.path.insert(0, HERE)
import dynamic_cases as cases  # noqa: E402

pytestmark = pytest.mark.multiprocess
by_engine = pytest.mark.parametrize("engine", engines_under_test())

ATOL = 1e-5
WORKER_COUNTS = (1, 2, 4)
CONFIGS = [(o, a) for o in cases.OPTIMIZERS for a in cases.ADMIT_AFTER]
CONFIGS.append(cases.ACCUMULATING)


@functools.cache
def launch(engine: str, num_workers: int) -> dict:
    """{rank: results} of one scenario of every config."""
    run = run_scenario(
        SCENARIO,
        "train",
        num_workers,
        {"configs": [list(c) for c in CONFIGS]},
        engine=engine,
        # 4 configs, each traced on every worker, on a shared 2-core machine.
        timeout=480,
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    for result in run.results.values():
        assert result["size"] == num_workers
        assert result["engine"] == engine
    return run.results


_expected: dict = {}


def expected(
    optimizer: str, admit_after: int, initial_head: list, strings=False
) -> dict:
    """The plain-Keras reference of one config, from the head's initial
    weights (rank 0's, which every rank gets); with `strings`, of the
    string keys' hashes, which stand for them under the strategy."""
    cache_key = (
        optimizer,
        admit_after,
        strings,
        *(w.tobytes() for w in initial_head),
    )
    if cache_key not in _expected:
        _expected[cache_key] = _train_reference(
            optimizer, admit_after, initial_head, strings
        )
    return _expected[cache_key]


def _train_reference(optimizer, admit_after, initial_head, strings) -> dict:
    keras.utils.clear_session()
    keys, targets = cases.make_data()
    if strings:
        keys = keras.layers.Hashing(num_bins=2**63 - 1)(
            tf.constant(cases.make_string_data()[0])
        ).numpy()
    steps = range(0, len(keys), cases.BATCH)
    batches = [keys[i : i + cases.BATCH] for i in steps]
    rows, order = reference.admitted_rows(batches * cases.EPOCHS, admit_after)
    init = InitialRows("uniform")(tf.constant(order), cases.DIM).numpy()
    model = reference.distinct_rows_model(init, cases.SEQ)
    model.get_layer("head").set_weights(initial_head)
    model.compile(optimizer=cases.make_optimizer(optimizer), loss="mse")
    losses = []
    for epoch in range(cases.EPOCHS):
        # The reference's rows change between epochs as keys are
        # admitted, so each epoch is its own fit.
        epoch_rows = rows[epoch * len(batches) : (epoch + 1) * len(batches)]
        losses += model.fit(
            np.concatenate(epoch_rows),
            targets,
            batch_size=cases.BATCH,
            epochs=1,
            shuffle=False,
            verbose=0,
        ).history["loss"]
    table = model.layers[1].get_weights()[0]
    final = {key: i for i, key in enumerate(order)}
    final_rows = np.vectorize(lambda k: final.get(k, -1))(keys)
    return {
        "loss": losses,
        "rows": {key: table[i] for i, key in enumerate(order)},
        "head": model.get_layer("head").get_weights(),
        "predict": model.predict(final_rows, verbose=0),
        "defaults": int((np.concatenate(rows) < 0).sum()),
    }


def _config(engine, num_workers, optimizer, admit_after, strings=False):
    if strings:
        results = strings_on(engine, num_workers)[1]
    else:
        results = launch(engine, num_workers)
    key = cases.key(optimizer, admit_after)
    got = {rank: results[rank][key] for rank in range(num_workers)}
    head = [np.asarray(w) for w in got[0]["initial_head"]]
    return got, expected(optimizer, admit_after, head, strings)


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
@pytest.mark.parametrize("optimizer,admit_after", CONFIGS)
def test_equals_static_embedding(engine, num_workers, optimizer, admit_after):
    _check_equal(*_config(engine, num_workers, optimizer, admit_after))


def test_the_accumulating_config_trains_otherwise():
    """Accumulating over 2 steps changes what one process learns, so the
    config above checks that the workers accumulate, not only train."""
    got, want = _config("tf", 1, *cases.ACCUMULATING)
    _, plain = _config("tf", 1, "adam", cases.ACCUMULATING[1])
    assert not np.allclose(want["loss"], plain["loss"], atol=1e-3)
    _check_equal(got, want)


def _check_equal(got: dict, want: dict) -> None:
    for result in got.values():
        np.testing.assert_allclose(
            result["loss"], want["loss"], atol=ATOL, rtol=0
        )
        for g, w in zip(result["final_head"], want["head"], strict=True):
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
        np.testing.assert_allclose(
            result["predict"], want["predict"], atol=ATOL, rtol=0
        )
    # Every admitted key has exactly one row, on one worker.
    live = np.concatenate([r["keys"] for r in got.values()])
    assert sorted(live.tolist()) == sorted(want["rows"])
    for result in got.values():
        for key, row in zip(result["keys"], result["rows"], strict=True):
            np.testing.assert_allclose(
                row, want["rows"][key], atol=ATOL, rtol=0, err_msg=str(key)
            )


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
def test_keys_live_on_their_owners(engine, num_workers):
    owners = KeyOwners.balanced(num_workers)
    results = launch(engine, num_workers)
    for rank, result in results.items():
        for optimizer, admit_after in CONFIGS:
            got = result[cases.key(optimizer, admit_after)]
            mine = got["keys"]
            want = owners.owner_of(tf.constant(mine, tf.int64)).numpy()
            assert (want == rank).all()
            assert (got["owners"] == rank).all()
            # Each worker's table has its own capacity; slots follow it.
            assert got["table_shape"] == (cases.CAPACITY, cases.DIM)
            # Adam's m and v; accumulating adds the gradient accumulator.
            slots = {"sgd": 0, "adam": 2, "adam_accumulating": 3}[optimizer]
            assert got["slot_shapes"] == [got["table_shape"]] * slots
            assert got["worker_stats"][rank]["rows"] == len(mine)
    if num_workers > 1:
        # The keys are spread: no worker holds them all.
        counts = [len(r[cases.key("sgd", 1)]["keys"]) for r in results.values()]
        assert max(counts) < sum(counts)


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
def test_the_plan_lists_the_dynamic_table(engine, num_workers):
    for result in launch(engine, num_workers).values():
        got = result[cases.key("sgd", 3)]
        entry = got["plan_entry"]
        assert entry["kind"] == "dynamic"
        assert tuple(entry["shape"]) == (cases.CAPACITY, cases.DIM)
        assert entry["bytes"] == cases.CAPACITY * cases.DIM * 4
        assert "admitted after 3 steps" in entry["reason"]
        where = "in this process" if num_workers == 1 else "whose hash it owns"
        assert where in entry["reason"]
        line = next(
            line
            for line in got["plan"].splitlines()
            if got["table_path"] in line
        )
        assert line.split()[:2] == ["dynamic", f"{cases.CAPACITY}x{cases.DIM}"]


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
def test_stats_are_summed_over_workers(engine, num_workers):
    # `stats()` and `CommunicationStats` (through `DynamicTableStats`)
    # give the job's figures on every worker, and each worker's own: its
    # live keys and its admissions, beside the bytes per path.
    results = launch(engine, num_workers)
    for optimizer, admit_after in CONFIGS:
        _, want = _config(engine, num_workers, optimizer, admit_after)
        got = {
            r: v[cases.key(optimizer, admit_after)] for r, v in results.items()
        }
        total = len(want["rows"])
        mine = [len(got[r]["keys"]) for r in range(num_workers)]
        for result in got.values():
            history = result["history"]
            # `dyn_embeddings`, or with the model's name (subclassed).
            table = result["table_path"].replace("/", "_")
            assert len(history["comm_total_sent_bytes"]) == cases.EPOCHS
            assert result["stats"]["rows"] == total
            assert sum(history[f"{table}_admissions"]) == total
            assert history[f"{table}_rows"][-1] == total
            assert result["stats"]["evictions"] == 0
            assert sum(history[f"{table}_evictions"]) == 0
            per_worker = [s["rows"] for s in result["worker_stats"]]
            assert per_worker == mine
            if num_workers == 1:
                assert f"{table}_rows_worker0" not in history
                continue
            for rank in range(num_workers):
                name = f"{table}_admissions_worker{rank}"
                assert sum(history[name]) == mine[rank]
                rows = history[f"{table}_rows_worker{rank}"]
                assert rows[-1] == mine[rank]


def test_admission_threshold_reads_default_rows():
    # The threshold config must have read default rows, or it tests
    # little about admission.
    _, want = _config(engines_under_test()[0], 1, "sgd", 3)
    assert want["defaults"] > 0


@by_engine
@pytest.mark.parametrize("num_workers", (2, 4))
def test_one_exchange_of_keys_per_step(engine, num_workers):
    got = launch(engine, num_workers)[0][cases.key("sgd", 1)]
    steps = cases.EPOCHS * cases.SAMPLES // cases.BATCH
    # Per train step: one all-to-all of keys, one of rows back (pull) and,
    # backward, one of gradients (push); no all-gather of the table's
    # gradient.
    calls = got["calls"]
    assert calls["ids"] == calls["sparse_pull"] == calls["sparse_push"]
    assert calls["ids"] == steps, calls


@by_engine
@pytest.mark.parametrize("num_workers", (2, 4))
def test_traffic_is_the_unique_keys_of_peers(engine, num_workers):
    # Per step a worker sends each unique key of its slice that a peer
    # owns once (16 bytes: key and lookups), receives its row and pushes
    # its gradient row, and answers the keys its peers ask it: nothing
    # more, padding apart (charged to `padding`).
    keys, _ = cases.make_data()
    owners = KeyOwners.balanced(num_workers)
    share = cases.BATCH // num_workers
    row_bytes = cases.DIM * 4
    asks = np.zeros([num_workers, num_workers], np.int64)  # [asker, owner]
    for start in range(0, cases.SAMPLES, cases.BATCH):
        for rank in range(num_workers):
            first = start + rank * share
            mine = np.unique(keys[first : first + share])
            owner = owners.owner_of(tf.constant(mine, tf.int64)).numpy()
            asks[rank] += np.bincount(owner, minlength=num_workers)
    asks *= cases.EPOCHS
    np.fill_diagonal(asks, 0)
    for rank, result in launch(engine, num_workers).items():
        got = result[cases.key("sgd", 1)]
        sent = got["bytes"]
        assert sent["ids"] == 16 * asks[rank].sum(), (rank, sent)
        assert sent["sparse_push"] == row_bytes * asks[rank].sum()
        assert got["pulled_bytes"] == row_bytes * asks[rank].sum()
        assert sent["sparse_pull"] == row_bytes * asks[:, rank].sum()


@by_engine
def test_refusals_on_two_workers(engine):
    run = run_scenario(
        SCENARIO, "refusals", 2, {}, engine=engine, timeout=240
    ).check()
    for result in run.results.values():
        assert (
            "`Adafactor` cannot update a dynamic table" in result["Adafactor"]
        )
        assert "`Lamb` cannot update a dynamic table" in result["Lamb"]
        accumulation = result["gradient_accumulation_steps"]
        assert "needs the optimizer wrapped" in accumulation, accumulation
        assert "HybridOptimizer(keras.optimizers.SGD" in accumulation
        assert (
            "`embeddings_regularizer` is not supported"
            in (result["regularizer"])
        )
        assert "OrthogonalRegularizer" in result["regularizer"]
        assert (
            "`embeddings_constraint` is not supported" in (result["constraint"])
        )
        for name in ("BackupAndRestore", "save_weights_only"):
            assert "ShardedCheckpoint" in result[name], result
            assert result[name].endswith("(after 0 steps)"), result


@by_engine
def test_penalties_and_clipping_norms_train_as_on_one_worker(engine):
    """An L1L2 penalty, `clipnorm`, `global_clipnorm` and both, on 2
    workers and on 3, whose slices of the batch differ in size: the
    penalty and the norms cover every worker's rows, as one process's
    (dense-gradient semantics: a row's gradient summed over its lookups)."""
    one, *many = (
        run_scenario(
            SCENARIO, "whole_table_terms", n, {}, engine=engine, timeout=300
        ).check()
        for n in (1, 2, 3)
    )
    want = one.results[0]
    for name in ("penalty", "clipnorm", "global_clipnorm"):
        # Each term changes what trains.
        assert not np.allclose(want[name]["loss"], want["unclipped"]["loss"])
    for run in many:
        for rank, result in run.results.items():
            for name, got in result.items():
                where = f"{name} on rank {rank} of {len(run.results)}"
                expected = want[name]
                for key in ("loss", "predict", "rows"):
                    np.testing.assert_allclose(
                        got[key], expected[key], atol=ATOL, err_msg=where
                    )
                np.testing.assert_array_equal(got["keys"], expected["keys"])
                for a, b in zip(got["head"], expected["head"], strict=True):
                    np.testing.assert_allclose(a, b, atol=ATOL, err_msg=where)


@by_engine
def test_a_constraint_on_each_row_trains_as_on_one_worker(engine):
    """`UnitNorm(axis=1)` maps each row by itself: on 2 workers, each
    worker's rows get what one worker gives them (`refusals` shows a
    constraint over columns refused)."""
    one, two = (
        run_scenario(
            SCENARIO, "row_constraint", n, {}, engine=engine, timeout=240
        ).check()
        for n in (1, 2)
    )
    want = one.results[0]
    live = 0
    for result in two.results.values():
        np.testing.assert_allclose(result["loss"], want["loss"], atol=ATOL)
        np.testing.assert_allclose(
            result["predict"], want["predict"], atol=ATOL
        )
        # Every live row was updated (each key is looked up in epoch 1),
        # then projected onto the unit sphere.
        np.testing.assert_allclose(result["norms"], 1.0, atol=1e-5)
        live += len(result["norms"])
    assert live == len(want["norms"]) > 0


STRING_CONFIGS = [("sgd", 1), ("adam", 3)]


@functools.cache
def strings_on(engine: str, num_workers: int) -> dict:
    path = os.path.join(_STRINGS, f"{engine}_{num_workers}.keras")
    run = run_scenario(
        SCENARIO,
        "train_strings",
        num_workers,
        {"configs": [list(c) for c in STRING_CONFIGS], "path": path},
        engine=engine,
        timeout=480,
    ).check()
    return path, run.results


_STRINGS = tempfile.mkdtemp(prefix="dynamic_strings_")


# Predicts with a `.keras` file in a fresh interpreter that cannot import
# keras_hybrid.
_CLEAN = """
import sys
sys.modules["keras_hybrid"] = None  # importing it now fails
import keras
import numpy as np
model = keras.saving.load_model(sys.argv[1])
import tensorflow as tf
keys = tf.data.Dataset.from_tensor_slices(np.load(sys.argv[2])).batch(8)
np.save(sys.argv[3], model.predict(keys, verbose=0))
"""


@by_engine
@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
@pytest.mark.parametrize("optimizer,admit_after", STRING_CONFIGS)
def test_string_keys_train_as_their_hashes(
    engine, num_workers, optimizer, admit_after
):
    """Under the strategy a string key stands for its hash: training
    equals the static reference over the hashes (same rows, admission and
    initial values), and the stock equivalent (`Hashing` first) reads
    the rows the layer reads."""
    got, want = _config(engine, num_workers, optimizer, admit_after, True)
    _check_equal(got, want)
    for result in got.values():
        np.testing.assert_array_equal(
            result["stock_looked_up"], result["looked_up"]
        )


@by_engine
def test_string_keys_saved_on_workers_serve_in_stock_keras(engine):
    path, results = strings_on(engine, 2)
    keys = os.path.join(_STRINGS, "keys.npy")
    np.save(keys, cases.make_string_data()[0])
    out = os.path.join(_STRINGS, f"{engine}_out.npy")
    subprocess.run(
        [sys.executable, "-c", _CLEAN, path, keys, out],
        check=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )
    last = cases.key(*STRING_CONFIGS[-1])
    np.testing.assert_array_equal(np.load(out), results[0][last]["predict"])


@by_engine
def test_masked_string_keys_on_workers(engine):
    """`mask_zero` with string keys on 2 workers: `""` is the mask, in
    the layer and in its stock copy (whose mask token is the hash of
    `""`), and the copy predicts what the workers predict."""
    run = run_scenario(
        SCENARIO, "masked_strings", 2, {}, engine=engine, timeout=480
    ).check()
    for result in run.results.values():
        np.testing.assert_array_equal(result["mask"], result["keys"] != b"")
        np.testing.assert_array_equal(result["stock_mask"], result["mask"])
        np.testing.assert_allclose(
            result["stock_predict"], result["predict"], rtol=1e-6
        )
        assert np.all(np.isfinite(result["loss"]))
    # The mask only tells later layers to skip a position: `""` is read
    # and admitted like any key (as row 0 of a stock `Embedding` is).
    assert run.results[0]["live"] == len(set(run.results[0]["keys"].ravel()))


@by_engine
def test_hashed_string_keys_are_refused_by_a_layer_keeping_strings(engine):
    """Weights saved under the strategy hold string keys as hashes, which
    cannot be turned back into strings: a plain layer says so."""
    path, _ = strings_on(engine, 1)
    keras.utils.clear_session()
    model, _ = cases.build_model(STRING_CONFIGS[-1][1], "string")
    model.compile(optimizer=cases.make_optimizer("adam"), loss="mse")
    with pytest.raises(ValueError, match="string keys as their hashes"):
        model.load_weights(path.replace(".keras", ".weights.h5"))
