"""`python -m keras_hybrid.simulate` with tiny flags, as a user runs it.

Each case is a subprocess: the command defines absl flags that other
command-line modules of the package define too.
"""

import json
import os
import subprocess
import sys
import tempfile

from keras_hybrid.costs import cost_model
from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.profile import Profile
from keras_hybrid.costs.profile import VariableStats
from keras_hybrid.testing import TestCase

TINY_LM = (
    "--workload=lm",
    "--vocab=64",
    "--dim=4",
    "--hidden=4",
    "--seq_len=3",
    "--num_sampled=2",
    "--batch_per_worker=4",
    "--warmup_steps=1",
    "--steps=1",
)


def _simulate(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "keras_hybrid.simulate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _toy_profile() -> Profile:
    table = VariableStats(
        "emb", "sparse", (10_000, 16), 4, 8, (10.0,), (4, 8), ((30.0, 55.0),)
    )
    dense = VariableStats("w", "dense", (16, 16), 4)
    return Profile("toy", (table, dense), (4, 8), (0.01, 0.02))


class SimulateCliTest(TestCase):
    def test_profiles_a_workload_and_writes_table_plot_and_json(self):
        with tempfile.TemporaryDirectory() as out:
            run = _simulate(*TINY_LM, "--workers=2,8", f"--out_dir={out}")
            self.assertEqual(run.returncode, 0, run.stderr[-3000:])
            self.assertIn("speed-up of hybrid", run.stdout)
            rows = [
                line.split()[0]
                for line in run.stdout.splitlines()
                if line.strip() and line.split()[0] in ("2", "8")
            ]
            self.assertEqual(rows, ["2", "8", "2", "8"])
            with open(os.path.join(out, "profile.json")) as f:
                profile = Profile.from_json(f.read())
            calls = {v.path: v.calls for v in profile.of_kind("sparse")}
            # The sampled softmax looks its table up twice per step.
            self.assertEqual(sorted(calls.values()), [1, 2])
            with open(os.path.join(out, "simulation.json")) as f:
                body = json.load(f)
            self.assertEqual(len(body["predictions"]), 2 * 4)
            with open(os.path.join(out, "simulation.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_reports_the_error_against_a_measured_run(self):
        profile = _toy_profile()
        spec = ClusterSpec(4, inter_bandwidth=2.5e6, inter_latency=0.0)
        pred = {
            m: cost_model.predict(profile, m, spec, 8)
            for m in ("hybrid", "dense")
        }
        # Measured: 25% more bytes than predicted, and twice the network
        # time over a loopback run that took the compute time.
        measured = {"workers": 4, "netem": "20mbit:0", "results": []}
        baseline = {"workers": 4, "netem": None, "results": []}
        for mode, p in pred.items():
            sent = {k: 1.25 * v for k, v in p.bytes.items()}
            step = 1e3 * (p.compute_seconds + 2 * p.comm_seconds)
            measured["results"].append(
                {
                    "mode": mode,
                    "bytes_per_step": sent,
                    "step_time_ms": {"median": step},
                }
            )
            baseline["results"].append(
                {
                    "mode": mode,
                    "step_time_ms": {"median": 1e3 * p.compute_seconds},
                }
            )
        with tempfile.TemporaryDirectory() as out:
            paths = {}
            for name, body in (
                ("profile", None),
                ("measured", measured),
                ("baseline", baseline),
            ):
                paths[name] = os.path.join(out, f"{name}.json")
                with open(paths[name], "w") as f:
                    f.write(
                        profile.to_json() if body is None else json.dumps(body)
                    )
            run = _simulate(
                f"--profile={paths['profile']}",
                "--batch_per_worker=8",
                "--workers=4",
                f"--measured={paths['measured']}",
                f"--baseline={paths['baseline']}",
                f"--out_dir={out}",
            )
            self.assertEqual(run.returncode, 0, run.stderr[-3000:])
            with open(os.path.join(out, "simulation.json")) as f:
                checks = json.load(f)["validation"]
        self.assertEqual([c["mode"] for c in checks], ["hybrid", "dense"])
        for c in checks:
            self.assertAlmostEqual(c["bytes_error"], 1 / 1.25 - 1)
            self.assertAlmostEqual(c["comm_error"], -0.5)
            self.assertEqual(c["compute_from"], "baseline")

    def test_bad_flags_name_the_flag(self):
        for flag, needle in (
            ("--modes=hybrid,horovod", "`--modes` must be a list of"),
            ("--bandwidth=fast", "A rate must be a number"),
            ("--workers=0", "`--workers` must be a list of ints >= 1"),
        ):
            run = _simulate("--profile=unused.json", flag)
            self.assertNotEqual(run.returncode, 0, flag)
            self.assertIn(needle, run.stderr, flag)

    def test_design_flags_ablation_and_shard_load(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "profile.json")
            with open(path, "w") as f:
                f.write(_toy_profile().to_json())
            run = _simulate(
                f"--profile={path}",
                "--workers=16",
                "--accelerators_per_host=4",
                "--fused",
                "--hierarchical",
                "--hot_rows=64",
                "--ablation",
                "--shard_load=8",
                "--zipf=1.2",
            )
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertIn("hierarchical exchange (HybridStrategy(", run.stdout)
        self.assertNotIn("padding per_pair", run.stdout)  # not asked for
        for label in ("max_pair", "default", "+fused", "+hierarchical"):
            self.assertIn(label, run.stdout)
        self.assertIn("+hot 64", run.stdout)
        self.assertIn("flat, hot 64", run.stdout)
        self.assertIn("busiest of 8 shards", run.stdout)

    def test_port_buffer_and_schedule_flags(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "profile.json")
            with open(path, "w") as f:
                f.write(_toy_profile().to_json())
            common = (
                f"--profile={path}",
                "--workers=8",
                "--accelerators_per_host=1",
                "--out_dir=" + tmp,
            )
            deep = _simulate(*common)
            self.assertEqual(deep.returncode, 0, deep.stderr[-2000:])
            self.assertIn("Port buffers: unlimited", deep.stdout)
            shallow = _simulate(
                *common,
                "--port_buffer_kb=0.1",
                "--rto=10ms",
                "--schedule=rounds",
            )
            self.assertEqual(shallow.returncode, 0, shallow.stderr[-2000:])
            with open(os.path.join(tmp, "simulation.json")) as f:
                body = json.load(f)
        self.assertIn("Port buffers: 0.1 kB per port", shallow.stdout)
        self.assertIn("TCP timeout 10 ms", shallow.stdout)
        self.assertIn("all-to-alls in rounds", shallow.stdout)
        self.assertEqual(body["flags"]["schedule"], "rounds")
        queue = {p["mode"]: p["queue_ms"] for p in body["predictions"]}
        # Every exchange with a block over 100 bytes per flow waits one
        # 10 ms timeout, in rounds too.
        self.assertGreater(queue["hybrid"], 0)
        self.assertAlmostEqual(queue["hybrid"] % 10, 0)

    def test_queue_validation_prints_every_run(self):
        data = os.path.join(os.path.dirname(__file__), "data")
        run = _simulate(
            f"--profile={os.path.join(data, 'lm20k_profile.json')}",
            f"--queue_validation={os.path.join(data, 'emulated_queues.json')}",
        )
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertIn("18 of 18 within the bound.", run.stdout)

    def test_parallax_profiles_need_no_profiling(self):
        run = _simulate(
            "--parallax=nmt",
            "--workers=48",
            "--accelerators_per_host=6",
            "--bandwidth=100gbit",
            "--latency=5us",
            "--ps_layout=per_host",
        )
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertIn("parallax-nmt, 128 samples per worker", run.stdout)
        self.assertIn("ps_only layout: per_host", run.stdout)
        self.assertNotIn("Profiling", run.stderr)
