"""Edge cases of `fit`/`predict` on real workers, and failures that must
not hang.

The edge cases run on the shared pool of workers (`scenarios.on_workers`);
a worker that dies, diverged collectives and a dead peer launch their own
processes, since the launch is what they test.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import keras
import numpy as np
import pytest

from keras_hybrid.testing import models
from keras_hybrid.testing import run_workers
from keras_hybrid.testing.multiprocess import engines_under_test
from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
WORKER = os.path.join(HERE, "scenario_worker.py")
SCENARIOS = os.path.join(HERE, "scenarios.py")
sys.path.insert(0, HERE)
import scenarios  # noqa: E402

pytestmark = pytest.mark.multiprocess
by_engine = pytest.mark.parametrize("engine", engines_under_test())


def _on_pool(case, num_workers=2, engine="tf", indexed_slices=None):
    return run_scenario(
        SCENARIOS,
        "on_workers",
        num_workers,
        {"case": case, "indexed_slices": indexed_slices},
        engine=engine,
    )


def _launch(case, num_workers=2, *args, timeout=300, engine="tf"):
    out_dir = tempfile.mkdtemp(prefix=f"{case}_{engine}_")
    return run_workers(
        WORKER,
        num_workers,
        out_dir,
        args=(f"--case={case}", *args),
        timeout=timeout,
        engine=engine,
    )


def _reference(case):
    keras.backend.clear_session()
    return scenarios.run_case(case, None)


def _assert_close(a, b, msg=""):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=msg)


@by_engine
def test_empty_slice_on_one_rank_neither_hangs_nor_diverges(engine):
    run = _on_pool("uneven", 3, engine=engine).check()
    first = run.results[0]
    for result in run.results.values():
        for a, b in zip(result["weights"], first["weights"], strict=True):
            np.testing.assert_array_equal(a, b)
        assert result["history"] == first["history"]
    assert np.isfinite(first["history"]["loss"]).all()


@by_engine
def test_validation_sample_class_weights_and_steps_per_epoch(engine):
    run = _on_pool("extras", engine=engine).check()
    ref = _reference("extras")
    for rank, result in run.results.items():
        for a, b in zip(result["weights"], ref["weights"], strict=True):
            _assert_close(a, b, f"rank {rank}")
        assert set(result["history"]) == set(ref["history"])
        for name in ref["history"]:
            _assert_close(result["history"][name], ref["history"][name], name)
        for name in ref["history_more"]:
            _assert_close(
                result["history_more"][name], ref["history_more"][name], name
            )


@by_engine
def test_indexed_slices_of_a_dense_table_are_all_gathered_not_densified(
    engine,
):
    run = _on_pool("embedding", engine=engine).check()
    ref = _reference("embedding")
    assert "IndexedSlices gradients are all-gathered" in run.stderr
    for result in run.results.values():
        for a, b in zip(result["weights"], ref["weights"], strict=True):
            _assert_close(a, b)
        # Embedding rows (4 floats) and their ids travel, not the table.
        comm = result["comm"]
        assert comm["sparse_push"]["bytes"] > 0
        assert comm["ids"]["bytes"] > 0
        steps = 2 * 192 // 48
        per_step_rows = comm["sparse_push"]["bytes"] / steps / 4 / 4
        assert per_step_rows <= 24 * 5  # this rank's lookups, no more


@by_engine
def test_adagrad_sees_one_row_per_id_however_a_table_is_summed(engine):
    # A replicated table's IndexedSlices gradient was handed to the
    # optimizer with one entry per lookup when all-gathered (and on one
    # worker) but summed per id when densified or partitioned: Adagrad,
    # which squares it, trained differently with the cost rule's choice.
    ref = _reference("adagrad")
    runs = {
        how: _on_pool("adagrad", 2, engine, indexed_slices=how)
        for how in ("allgather", "allgather_unique", "densify")
    }
    for how, run in runs.items():
        run.check()
        for a, b in zip(run.results[0]["weights"], ref["weights"], strict=True):
            _assert_close(a, b, how)


@by_engine
def test_logs_are_global_when_a_model_reports_some_of_its_metrics(engine):
    # A `compute_metrics` that left one metric out of the training logs
    # (keras-rs' multi-task example) kept every training log local: rank
    # 0's own rows' loss and rmse.
    run = _on_pool("partial_metrics", engine=engine).check()
    ref = _reference("partial_metrics")
    assert set(ref["history"]) == {"loss", "rmse"}
    for rank, result in run.results.items():
        assert set(result["history"]) == set(ref["history"])
        for name in ref["history"]:
            _assert_close(result["history"][name], ref["history"][name], name)
        for name, value in ref["evaluate"].items():
            _assert_close(result["evaluate"][name], value, f"rank {rank}")


@by_engine
def test_a_loss_averaged_by_compute_loss_trains_as_on_one_process(engine):
    # keras-rs' SASRec averages its loss itself in `compute_loss`: Keras
    # did not divide it by the number of workers, so 2 workers trained
    # with twice the gradient and logged twice the loss.
    run = _on_pool("own_mean_loss", engine=engine).check()
    ref = _reference("own_mean_loss")
    for rank, result in run.results.items():
        for a, b in zip(result["weights"], ref["weights"], strict=True):
            _assert_close(a, b, f"rank {rank}")
        for name in ("loss", "val_loss"):
            _assert_close(result["history"][name], ref["history"][name], name)


@by_engine
def test_a_generator_trains_on_every_batch_in_order(engine):
    # Keras' TF trainer drew a batch from a fresh iterator to build the
    # model under a strategy; from a generator, the batches that iterator
    # had read ahead were lost (on 2 workers the 3rd to 5th).
    run = _on_pool("generator", engine=engine).check()
    ref = _reference("generator")
    for a, b in zip(run.results[0]["weights"], ref["weights"], strict=True):
        _assert_close(a, b)


@by_engine
def test_a_model_compiled_with_xla_trains_without_it(engine):
    # XLA compiles no collective (on CPU none at all): a script that sets
    # `jit_compile=True` must train as one process does, with a warning.
    run = _on_pool("xla", engine=engine).check()
    ref = _reference("xla")
    assert ref["jit_compile"]
    assert "compiled with jit_compile=True" in run.stderr
    for rank, result in run.results.items():
        assert not result["jit_compile"]
        for a, b in zip(result["weights"], ref["weights"], strict=True):
            _assert_close(a, b, f"rank {rank}")
        _assert_close(result["predictions"], ref["predictions"])


@by_engine
def test_random_layers_draw_another_stream_on_each_worker(engine):
    # Keras' seed generators are variables, the same on every worker: each
    # worker's slice of a batch got the same dropout masks and noise. Now
    # rank 0 draws what one process draws for its rows, the others fold
    # their rank into the seed.
    run = _on_pool("random", engine=engine).check()
    ref = _reference("random")["predictions"]
    out = run.results[0]["predictions"]
    np.testing.assert_array_equal(out, run.results[1]["predictions"])
    for step in (0, 8):
        rank0, rank1 = out[step : step + 4], out[step + 4 : step + 8]
        np.testing.assert_array_equal(rank0, ref[step : step + 4])
        assert (rank0[:, :6] != rank1[:, :6]).any()  # dropout masks
        assert (rank0[:, 6:] != rank1[:, 6:]).all()  # uniform noise
    # The generators advance once per step on every worker alike.
    assert (out[:4, 6:] != out[8:12, 6:]).all()


def test_a_dataset_seeded_by_the_script_shuffles_as_in_one_process():
    # The strategy used to draw a random global seed when the script set
    # none, so `shuffle(n, seed=1)` ordered differently on every run and
    # from one process. Unseeded draws must still agree across ranks.
    run = run_scenario(SCENARIOS, "seeded_shuffles", 2).check()
    for result in run.results.values():
        assert result["fresh"]  # the pool's process had no global seed
        assert result["alone"][0] != result["alone"][1]  # reshuffled
        assert result["under"] == result["alone"]
    np.testing.assert_array_equal(
        run.results[0]["unseeded"], run.results[1]["unseeded"]
    )


@by_engine
def test_batchnorm_statistics_are_the_mean_of_the_workers(engine):
    # Unsynchronized BatchNormalization updates its moving statistics from
    # each worker's rows: the copies drifted apart. They are now averaged
    # over the workers after each step, on every rank alike.
    run = _on_pool("batchnorm", engine=engine).check()
    rank0, rank1 = run.results[0], run.results[1]
    for a, b in zip(rank0["weights"], rank1["weights"], strict=True):
        np.testing.assert_array_equal(a, b)
    x, _ = models.make_data(96)
    kernel, bias = rank0["features"]
    h = x.astype("float64") @ kernel + bias
    mean, variance = np.zeros(4), np.ones(4)
    for step in range(2):
        halves = np.split(h[48 * step : 48 * (step + 1)], 2)
        # The mean of the halves' variances, not the global batch's.
        batch_mean = np.mean([part.mean(axis=0) for part in halves], axis=0)
        batch_var = np.mean([part.var(axis=0) for part in halves], axis=0)
        mean = 0.99 * mean + 0.01 * batch_mean
        variance = 0.99 * variance + 0.01 * batch_var
    _assert_close(rank0["moving_mean"], mean)
    _assert_close(rank0["moving_variance"], variance)
    # The mean of equal halves' means is the global mean: as one process.
    ref = _reference("batchnorm")
    _assert_close(rank0["moving_mean"], ref["moving_mean"])
    assert (
        np.abs(rank0["moving_variance"] - ref["moving_variance"]).max() > 1e-4
    )


@by_engine
def test_predict_returns_every_row_in_input_order_on_every_rank(engine):
    run = _on_pool("predict", engine=engine).check()
    ref = _reference("predict")
    for result in run.results.values():
        assert len(result["predictions"]) == 100
        _assert_close(result["predictions"], ref["predictions"])


@by_engine
def test_worker_killed_mid_epoch_stops_the_launch_and_names_the_rank(engine):
    start = time.monotonic()
    run = _launch(
        "long", 2, "--die_rank=1", "--timeout=20", timeout=120, engine=engine
    )
    assert run.returncode != 0
    if engine == "tf":
        assert "rank 1" in run.stderr
    else:
        # horovodrun's own words.
        assert "Process 1 exit with status code" in run.stdout, run.stdout
    # A hang would reach the 120 s launch timeout; stopping takes about
    # 30 s (the 20 s collective timeout), more on a loaded machine.
    assert time.monotonic() - start < 110


@by_engine
def test_second_strategy_in_a_process_reuses_the_server(engine):
    run = run_scenario(
        os.path.join(HERE, "two_strategies_scenarios.py"),
        "two_strategies",
        2,
        engine=engine,
        timeout=180,
    ).check()
    # Both strategies trained, and the replicas agree after each.
    for result in run.results.values():
        for a, b in zip(
            run.results[0]["weights"][0], result["weights"][0], strict=True
        ):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(
            run.results[0]["weights"][1], result["weights"][1], strict=True
        ):
            np.testing.assert_array_equal(a, b)
        if engine == "tf":
            assert "already joined a cluster" in result["error"]
        else:
            # Horovod's cluster is horovodrun's: another one is refused.
            assert "cluster comes from `horovodrun`" in result["error"]


@by_engine
def test_diverged_collectives_time_out_instead_of_hanging(engine):
    start = time.monotonic()
    run = run_workers(
        os.path.join(HERE, "diverge_worker.py"),
        2,
        tempfile.mkdtemp(prefix=f"diverge_{engine}_"),
        timeout=120,
        engine=engine,
    )
    assert run.returncode != 0
    if engine == "tf":
        assert "DeadlineExceeded" in run.stderr
    else:
        # Horovod compares the shapes of a collective before running it.
        assert "Mismatched ALLREDUCE tensor shapes" in run.stderr, run.stderr
    # A hang would reach the 120 s launch timeout; stopping takes about
    # 30 s (the 20 s collective timeout), more on a loaded machine.
    assert time.monotonic() - start < 110


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_dead_peer_is_an_error_on_the_survivor_within_the_timeout():
    # TF engine only: with Horovod, horovodrun stops the job (test above).
    # No launcher here: nothing kills the survivor for us. Its collectives
    # must fail by themselves within `timeout_seconds`.
    ports = _free_ports(2)
    out_dir = tempfile.mkdtemp(prefix="dead_peer_")
    procs = []
    for rank in range(2):
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": rank},
        }
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps(tf_config),
            "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    WORKER,
                    f"--out_dir={out_dir}",
                    "--case=long",
                    "--die_rank=1",
                    "--timeout=10",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        assert procs[1].wait(timeout=120) == -signal.SIGKILL
        died = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
        assert procs[0].returncode != 0
        assert time.monotonic() - died < 10 + 30
        assert "Error" in err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
