"""Train steps that compute their own gradients, on 2 and 4 workers, equal
one process on the same global batches (float64, 1e-5).

The rule (`patches/loss_scaling.py`, docs/strategy.md): a loss scaled for
distribution (Keras' reducing losses, `tf.nn.compute_average_loss`) or a
sum keeps the workers' gradients summed; a loss the step averaged by
itself gets them averaged. One scenario per worker count, on the shared
pool (`workers/train_step_scenarios.py`), trains every case of
`workers/train_steps.py`.
"""

import contextlib
import functools
import os
import re
import subprocess
import sys
import tempfile

import keras
import numpy as np
import pytest

from keras_hybrid.testing.pool import run_scenario

HERE = os.path.join(os.path.dirname(__file__), "workers")
sys.path.insert(0, HERE)
import train_steps  # noqa: E402

pytestmark = pytest.mark.multiprocess
ATOL = 1e-5


@functools.cache
def launch(num_workers: int) -> dict:
    run = run_scenario(
        os.path.join(HERE, "train_step_scenarios.py"),
        "train",
        num_workers,
        timeout=420,
    ).check()
    assert sorted(run.results) == list(range(num_workers))
    return run.results


@contextlib.contextmanager
def _float64():
    """floatx and the global dtype policy float64 inside, as they were
    outside. Keras fixes the global policy at the first layer it builds
    after a `set_floatx`, which a `set_floatx` back does not undo: every
    later model of this process would be float64."""
    floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        yield
    finally:
        keras.config.set_floatx(floatx)
        keras.config.set_dtype_policy(policy)


@functools.cache
def one_process(case: str) -> tuple[list, dict]:
    """The final weights and logs of `case` in this process."""
    keras.backend.clear_session()
    with _float64():
        return train_steps.train(train_steps.build(case), case)


@functools.cache
def untrained(case: str) -> list:
    with _float64():
        return train_steps.build(case).get_weights()


@pytest.mark.parametrize("num_workers", [2, 4])
@pytest.mark.parametrize("case", train_steps.CASES)
def test_equals_one_process(case, num_workers):
    want, _ = one_process(case)
    moved = max(
        float(np.abs(a - b).max())
        for a, b in zip(want, untrained(case), strict=True)
    )
    assert moved > 1e-3, "no training"
    for rank, result in launch(num_workers).items():
        for i, (got, w) in enumerate(zip(result[case], want, strict=True)):
            assert got.dtype == w.dtype, (case, rank, i)
            np.testing.assert_allclose(
                got,
                w,
                atol=ATOL,
                rtol=0,
                err_msg=f"{case}: {num_workers} workers, rank {rank}, "
                f"weight {i}",
            )


@pytest.mark.parametrize("num_workers", [2, 4])
def test_the_guide_step_logs_what_one_process_logs(num_workers):
    # Its loss tracker got the loss Keras scaled for distribution: on N
    # workers it logged 1/N of one process's loss.
    _, want = one_process("guide")
    for rank, result in launch(num_workers).items():
        got = result["logs"]["guide"]
        for name in ("loss", "mae"):
            np.testing.assert_allclose(
                got[name], want[name], rtol=1e-6, err_msg=f"{name} {rank}"
            )


def test_clipping_by_norm_trains_a_partitioned_table():
    for result in launch(2).values():
        paths = [
            p
            for p in result["kinds"]
            if re.fullmatch(r"sequential(_\d+)?/table/embeddings", p)
        ]
        assert len(paths) == len(train_steps.CLIPPING_TABLE), result["kinds"]
        assert {result["kinds"][p] for p in paths} == {"sparse"}


def test_the_tables_of_the_custom_steps_are_partitioned():
    for result in launch(2).values():
        for model in ("table_step", "table_gan"):
            (kind,) = [
                k
                for p, k in result["kinds"].items()
                if re.fullmatch(f"{model}(_\\d+)?/table/embeddings", p)
            ]
            assert kind == "sparse", model


@pytest.mark.parametrize("num_workers", [2, 4])
@pytest.mark.parametrize(
    "case",
    ["gan", "gan_keras_losses", "gan_global_sums", "read_after_update"]
    + ["raw_logs"],
)
def test_a_step_logs_the_mean_losses_of_one_process(case, num_workers):
    # A GAN's loss on each worker is a mean of its rows, a Keras loss
    # scaled for distribution, or its part of a sum over the global batch;
    # the mean metrics given them log one process's means in every case.
    # `read_after_update` logs a loss of the rows its step updated.
    # `raw_logs` returns tensors, not metrics: a mean of its rows under the
    # name of Keras' loss tracker (which it never updates), a part of a
    # sum, a sum, and a count every worker all-reduced.
    _, want = one_process(case)
    for rank, result in launch(num_workers).items():
        got = result["logs"][case]
        print("DEBUG", case, rank, got, want)
        for name in want:
            np.testing.assert_allclose(
                got[name], want[name], rtol=1e-6, err_msg=f"{name} {rank}"
            )


def test_clipping_optimizers_train_a_replicated_table():
    # Their table gradients are rows (`IndexedSlices`), clipped as one
    # process clips them, not a partitioned table's summed rows.
    for result in launch(2).values():
        paths = [p for p in result["kinds"] if p.endswith("rows/embeddings")]
        assert len(paths) == len(train_steps.CLIPPING)
        assert {result["kinds"][p] for p in paths} == {"dense"}


def test_averaging_is_logged_once():
    # Run the VAE on 2 workers alone and read the launcher's output.
    script = (
        f"import os, sys; sys.path.insert(0, {HERE!r})\n"
        "import keras, keras_hybrid as kh, train_steps\n"
        "from absl import logging\n"
        "logging.set_verbosity(logging.INFO)\n"
        "keras.config.set_floatx('float64')\n"
        "with kh.HybridStrategy() as s:\n"
        "    with s.scope():\n"
        "        m = train_steps.build('vae')\n"
        "    train_steps.train(m, 'vae')\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "keras_hybrid.run", "-np", "2"),
            *("--threads", "1", sys.executable, f.name),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    lines = [ln for ln in output.splitlines() if "gradients are averaged" in ln]
    assert len(lines) == 2, output[-3000:]  # once per rank
    assert {ln.split("]")[0] for ln in lines} == {"[0", "[1"}
