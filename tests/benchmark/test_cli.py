"""`python -m keras_hybrid.benchmark` end to end with tiny sizes."""

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import pytest

from tests.emulation.test_network import links
from tests.emulation.test_network import namespaces

pytestmark = pytest.mark.netns

TINY = (
    "--workload=lm",
    "--workers=2",
    "--steps=3",
    "--warmup_steps=1",
    "--vocab=500",
    "--dim=8",
    "--hidden=8",
    "--seq_len=4",
    "--num_sampled=4",
    "--batch_per_worker=4",
)
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "keras_hybrid.benchmark", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def start_cli(*args, **popen_kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "keras_hybrid.benchmark", *TINY, *args],
        env=ENV,
        text=True,
        **popen_kwargs,
    )


def leftovers(pid: int) -> set[str]:
    """Namespaces and links named after a CLI process that has exited."""
    tag = f"kh{pid % 100000}"
    return {n for n in namespaces() | links() if n.startswith(tag)}


@functools.cache
def three_modes() -> tuple[dict, str]:
    out = tempfile.mkdtemp(prefix="khbench_cli_")
    path, png = os.path.join(out, "r.json"), os.path.join(out, "r.png")
    proc = run_cli(
        *TINY,
        "--modes=hybrid,allgather,dense,ps_only",
        f"--output_json={path}",
        f"--plot={png}",
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    with open(path) as f:
        return json.load(f), png


@pytest.mark.multiprocess
class TestThreeModes:
    def test_json_has_every_mode_and_field(self):
        report, _ = three_modes()
        assert report["workload"] == "lm" and report["workers"] == 2
        assert report["netem"] is None
        # ps_only is left out (with a logged reason), not faked.
        modes = [r["mode"] for r in report["results"]]
        assert modes == ["hybrid", "allgather", "dense"]
        for r in report["results"]:
            assert r["samples_per_sec"] > 0
            assert 0 < r["step_time_ms"]["median"] <= r["step_time_ms"]["p90"]
            assert set(r["bytes_per_step"]) == {
                "total",
                "dense",
                "sparse_pull",
                "sparse_push",
                "ids",
                "padding",
            }
            assert r["lower_bound_bytes_per_step"] > 0

    def test_each_mode_moves_what_it_should(self):
        report, _ = three_modes()
        hybrid, allgather, dense = (
            r["bytes_per_step"] for r in report["results"]
        )
        # Same workload, data and bound in every mode.
        bounds = {r["lower_bound_bytes_per_step"] for r in report["results"]}
        assert len(bounds) == 1
        assert hybrid["sparse_pull"] > 0 and hybrid["sparse_push"] > 0
        assert allgather["sparse_pull"] == 0 and allgather["sparse_push"] > 0
        assert dense["sparse_push"] == 0 and dense["ids"] == 0
        # Densified tables: 2 (N - 1) / N of (2 tables of 500 x 8 floats).
        assert dense["dense"] > 2 * 500 * 8 * 4
        assert hybrid["total"] < dense["total"]

    def test_plot_is_a_png(self):
        _, png = three_modes()
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


class ErrorsTest(unittest.TestCase):
    def test_unknown_mode_and_bad_netem(self):
        proc = run_cli(*TINY, "--modes=hybrid,nccl", timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("Received: 'nccl'", proc.stderr)
        proc = run_cli(*TINY, "--netem=fast", timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("BANDWIDTH:LATENCY", proc.stderr)

    def test_hybrid_hot_needs_hot_rows(self):
        proc = run_cli(*TINY, "--modes=hybrid_hot", timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("needs `--hot_rows` > 0", proc.stderr)
        self.assertNotIn("mode 1/", proc.stderr)

    def test_horovod_missing_fails_before_any_launch(self):
        proc = run_cli(*TINY, "--modes=hybrid,horovod", timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("horovod.tensorflow", proc.stderr)
        self.assertNotIn("mode 1/", proc.stderr)


@unittest.skipUnless(os.geteuid() == 0, "needs root")
@pytest.mark.multiprocess
class NetemCliTest(unittest.TestCase):
    def test_one_mode_in_namespaces_then_nothing_left(self):
        out = tempfile.mkdtemp(prefix="khbench_netem_")
        path = os.path.join(out, "r.json")
        proc = start_cli(
            "--modes=hybrid",
            "--netem=1gbit:0",
            f"--output_json={path}",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, stderr[-3000:])
        self.assertIn("10.213.0.1", stderr)  # the workers' namespace address
        with open(path) as f:
            report = json.load(f)
        self.assertEqual(report["netem"], "1gbit:0")
        self.assertGreater(report["results"][0]["bytes_per_step"]["total"], 0)
        self.assertEqual(leftovers(proc.pid), set())

    def test_failing_run_leaves_nothing(self):
        # One second is too short to start TensorFlow: the mode times out.
        proc = start_cli(
            "--modes=hybrid",
            "--netem=1gbit:0",
            "--timeout=1",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("exited with code 124", stderr)
        self.assertEqual(leftovers(proc.pid), set())

    def test_sigterm_leaves_nothing(self):
        proc = start_cli(
            "--modes=hybrid",
            "--netem=1gbit:0",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not leftovers(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertTrue(leftovers(proc.pid), "the network never came up")
        time.sleep(2)  # let the workers start
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(leftovers(proc.pid), set())


@pytest.mark.multiprocess
class ScaledOverHostsCliTest(unittest.TestCase):
    """`--target_step_ms` over `--emulated_hosts`: a calibration run, then
    the mode over ssh on two namespaces acting as hosts. One mode only:
    each launch costs tens of seconds on a loaded machine."""

    def test_scaled_link_over_ssh_hosts(self):
        from keras_hybrid.emulation.hosts import install_problem

        problem = install_problem()
        if problem:
            self.skipTest(f"emulated hosts not tested: {problem}")
        out = tempfile.mkdtemp(prefix="khbench_scaled_")
        path = os.path.join(out, "r.json")
        proc = start_cli(
            "--modes=hybrid",
            "--emulated_hosts=2",
            "--target_step_ms=1",
            "--target_bandwidth=1gbit",
            f"--output_json={path}",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, stderr = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 0, stderr[-3000:])
        with open(path) as f:
            report = json.load(f)
        scaling = report["scaling"]
        # rate here = 1 Gbit/s x 1 ms / (step time measured here).
        rate_bits = float(scaling["emulated_rate"].removesuffix("kbit")) * 1e3
        self.assertAlmostEqual(
            rate_bits, 1e9 * 1.0 / scaling["compute_ms_here"], delta=1e3
        )
        self.assertEqual(report["netem"], f"{scaling['emulated_rate']}:0us")
        self.assertIn("communication's share of a step", stderr)
        # Against the target: the wire time of the bytes at 1 Gbit/s; with
        # no allgather run there is no speed-up to set beside a ceiling.
        (against,) = report["target"].values()
        hybrid = report["results"][0]
        busiest = max(
            hybrid["bytes_per_step"]["total"],
            hybrid["received_bytes_per_step"]["total"],
        )
        self.assertAlmostEqual(against["target_wire_ms"], 8e3 * busiest / 1e9)
        self.assertNotIn("allowed_speedup", against)
        self.assertIn("allowed_by_bytes", stderr)
        self.assertIn("workers start over ssh, as with --hosts", stderr)
        self.assertIn("serving on host1:", stderr)
        # One worker per host: each has its own eth0, whose counters see at
        # least what the communication layer counted (plus headers, which
        # at these tiny sizes are most of it).
        (result,) = report["results"]
        counted = result["bytes_per_step"]["total"]
        self.assertGreaterEqual(result["interface_bytes_per_step"], counted)
        self.assertEqual(leftovers(proc.pid), set())
