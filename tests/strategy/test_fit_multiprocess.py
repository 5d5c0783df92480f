"""N real worker processes vs one plain-Keras process on the global batch."""

import functools
import os
import sys

import keras
import numpy as np
import pytest

from keras_hybrid.testing import models
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario

SCENARIOS = os.path.join(
    os.path.dirname(__file__), "workers", "fit_scenarios.py"
)
sys.path.insert(0, os.path.dirname(SCENARIOS))
import fit_scenarios  # noqa: E402

CONFIGS = [
    [kind, opt] for kind in models.MODEL_KINDS for opt in ("sgd", "adam")
]
pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.parametrize("engine", engines_under_test()),
]


@functools.cache
def launch(engine: str, num_workers: int, configs=None, **options):
    configs = CONFIGS if configs is None else [list(c) for c in configs]
    run = run_scenario(
        SCENARIOS,
        "train",
        num_workers,
        {"configs": configs, **options},
        engine=engine,
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    assert all(r["engine"] == engine for r in run.results.values())
    return run.results


@functools.cache
def reference(kind, opt, batch_size=48, accumulation=0):
    """Plain Keras, one process, global batch, rank 0's initial weights
    (computed once: the tests on 2 and 3 workers compare with it)."""
    keras.backend.clear_session()
    x, y = models.make_data(240)
    model = models.build_model(kind, seed=100)
    extra = {}
    if accumulation:
        extra["gradient_accumulation_steps"] = accumulation
    models.compile_model(model, opt, **extra)
    history = model.fit(
        x, y, batch_size=batch_size, epochs=3, shuffle=False, verbose=0
    )
    evaluation = model.evaluate(x, y, batch_size=48, verbose=0)
    return model.get_weights(), history.history, evaluation


@pytest.mark.parametrize("num_workers", [2, 3])
@pytest.mark.parametrize("kind,opt", CONFIGS)
def test_weights_metrics_and_evaluate_match_one_process(
    engine, num_workers, kind, opt
):
    results = launch(engine, num_workers)
    ref_weights, ref_history, ref_eval = reference(kind, opt)
    key = f"{kind}/{opt}"
    for rank, result in results.items():
        got = result[key]
        for w, r in zip(got["weights"], ref_weights, strict=True):
            np.testing.assert_allclose(w, r, atol=1e-5, rtol=0)
        for name, values in ref_history.items():
            np.testing.assert_allclose(
                got["history"][name],
                values,
                atol=1e-5,
                rtol=0,
                err_msg=f"rank {rank} history {name}",
            )
        np.testing.assert_allclose(got["evaluate"], ref_eval, atol=1e-5)
    # Replicas and metrics are bit-identical across ranks.
    first = results[0][key]
    for result in results.values():
        for a, b in zip(result[key]["weights"], first["weights"], strict=True):
            np.testing.assert_array_equal(a, b)
        assert result[key]["history"] == first["history"]


def test_dense_gradients_are_fused_into_one_all_reduce_per_step(engine):
    results = launch(engine, 2)
    steps = 3 * 240 // 48
    for result in results.values():
        assert result["sequential/sgd"]["comm"]["dense"]["calls"] == steps


def test_tf_data_input_is_split_like_numpy(engine):
    results = launch(engine, 2, dataset="global")
    ref_weights, _, _ = reference("functional", "adam")
    for result in results.values():
        for w, r in zip(
            result["functional/adam"]["weights"], ref_weights, strict=True
        ):
            np.testing.assert_allclose(w, r, atol=1e-5, rtol=0)


@pytest.mark.parametrize("how", ["distributed", "per_worker", "sharded"])
def test_a_dataset_the_strategy_distributed_is_not_split_again(engine, how):
    # `fit` hands a dataset that is not a `tf.distribute.DistributedDataset`
    # to the strategy to distribute: one already made per worker (by
    # `experimental_distribute_dataset`, TF's multi-worker tutorials'
    # `distribute_datasets_from_function`, or a Horovod script's
    # `shard(size, rank)`) must train as the global one.
    configs = (("functional", "adam"), ("sequential", "sgd"))
    results = launch(engine, 2, configs=configs, dataset=how)
    for kind, opt in configs:
        ref_weights, ref_history, _ = reference(kind, opt)
        for result in results.values():
            got = result[f"{kind}/{opt}"]
            for w, r in zip(got["weights"], ref_weights, strict=True):
                np.testing.assert_allclose(w, r, atol=1e-5, rtol=0)
            np.testing.assert_allclose(
                got["history"]["loss"], ref_history["loss"], atol=1e-5
            )


def test_a_step_outside_strategy_run_is_refused(engine):
    # Keras all-reduces dense gradients only in a replica context, while a
    # table's were summed by its push: the model trained on a mix.
    run = run_scenario(
        SCENARIOS, "apply_outside_step", 2, {}, engine=engine
    ).check()
    for result in run.results.values():
        assert "outside a replica step" in result["error"], result


def test_gradient_accumulation_crosses_network_once_per_k_steps(engine):
    # 2 workers x batch 24, accumulated over 2 steps == 1 process, batch 48
    # accumulated over 2 steps; dense collectives happen every 2nd step.
    results = launch(engine, 2, accumulation=2)
    ref_weights, _, _ = reference("sequential", "sgd", accumulation=2)
    for result in results.values():
        got = result["sequential/sgd"]
        for w, r in zip(got["weights"], ref_weights, strict=True):
            np.testing.assert_allclose(w, r, atol=1e-5, rtol=0)
        steps = 3 * 240 // 48
        assert got["comm"]["dense"]["calls"] == steps // 2


def test_a_model_that_cannot_infer_before_fit_trains(engine):
    # keras-rs' basic retrieval example: inference scores candidates that
    # exist only after `fit`. Keras' symbolic build under a strategy (and
    # placement's scratch traces of `test_step`) call it in inference
    # mode and fail; plain Keras never does. It must train as one plain
    # process, and its retrieval layer must take its candidates after.
    run = run_scenario(SCENARIOS, "late_retrieval", 2, {}, engine=engine)
    keras.backend.clear_session()
    want = fit_scenarios.fit_retrieval()
    for rank, got in run.check().results.items():
        np.testing.assert_allclose(got["loss"], want["loss"], atol=1e-5)
        np.testing.assert_allclose(got["items"], want["items"], atol=1e-5)
        assert got["top"] == want["top"], rank
