"""The scaled link and the target's ceiling, with numbers checkable by
hand: a 2 ms accelerator step on 10 Gbit/s links, where 1.25 MB take
1 ms on the wire."""

import unittest

from keras_hybrid.benchmark import target_cluster


def result(mode, samples_per_sec, step_ms, sent, received=None):
    return {
        "mode": mode,
        "samples_per_sec": samples_per_sec,
        "step_time_ms": {"median": step_ms, "p90": step_ms},
        "bytes_per_step": {"total": sent},
        "received_bytes_per_step": {"total": received or sent},
    }


def calibration(*step_ms):
    return [result("hybrid", 1.0, ms, 0.0) for ms in step_ms]


class ScaledLinkTest(unittest.TestCase):
    def test_rate_scales_with_the_median_compute_time(self):
        # Median of 150, 200, 400 ms: 200 ms here for 2 ms there, so the
        # link runs 100x slower: 10 Gbit/s -> 100 Mbit/s.
        spec, scaling = target_cluster.scaled_link(
            calibration(150.0, 400.0, 200.0), "10gbit", 2.0, "hybrid"
        )
        self.assertEqual(spec.rate, "100000kbit")
        self.assertEqual(spec.delay_us, 0.0)
        self.assertEqual(scaling["compute_ms_here"], 200.0)
        self.assertEqual(scaling["compute_ms_runs"], [150.0, 400.0, 200.0])
        self.assertEqual(scaling["time_scale"], 100.0)
        self.assertEqual(scaling["emulated_rate"], "100000kbit")
        self.assertEqual(scaling["calibration_mode"], "hybrid")


class AgainstTargetTest(unittest.TestCase):
    def setUp(self):
        _, self.scaling = target_cluster.scaled_link(
            calibration(200.0), "10gbit", 2.0, "hybrid"
        )
        # At 10 Gbit/s: allgather 4 ms on the wire, hybrid 1 ms (its
        # received bytes, the larger direction), dense 8 ms.
        self.measured = [
            result("hybrid", 300.0, 250.0, 1.0e6, received=1.25e6),
            result("allgather", 100.0, 500.0, 5.0e6),
            result("dense", 40.0, 1000.0, 10.0e6),
        ]

    def test_allowed_speedup_from_bytes(self):
        got = target_cluster.against_target(self.measured, self.scaling)
        hybrid = got["hybrid"]
        self.assertAlmostEqual(hybrid["target_wire_ms"], 1.0)
        self.assertAlmostEqual(hybrid["target_comm_share"], 1 / 3)
        self.assertAlmostEqual(hybrid["measured_comm_share"], 1 - 200 / 250)
        self.assertAlmostEqual(hybrid["speedup"], 3.0)
        # (C + a) / (C + h) = (2 + 4) / (2 + 1), below the byte advantage
        # of 4 (or 5 on sent bytes): the compute caps it.
        self.assertAlmostEqual(hybrid["allowed_speedup"], 2.0)
        self.assertAlmostEqual(hybrid["measured_over_allowed"], 1.5)
        dense = got["dense"]
        self.assertAlmostEqual(dense["allowed_speedup"], 6 / 10)
        self.assertAlmostEqual(dense["measured_over_allowed"], 0.4 / 0.6)
        self.assertAlmostEqual(got["allgather"]["allowed_speedup"], 1.0)
        self.assertAlmostEqual(got["allgather"]["target_comm_share"], 4 / 6)

    def test_allowed_speedup_follows_the_target(self):
        # The same bytes on 1 Gbit/s links: a = 40 ms and h = 10 ms, so
        # (2 + 40) / (2 + 10) = 3.5, closer to the byte advantage of 4.
        _, scaling = target_cluster.scaled_link(
            calibration(200.0), "1gbit", 2.0, "hybrid"
        )
        got = target_cluster.against_target(self.measured, scaling)
        self.assertAlmostEqual(got["hybrid"]["allowed_speedup"], 3.5)

    def test_compute_share_is_never_negative(self):
        self.measured[0]["step_time_ms"]["median"] = 150.0
        got = target_cluster.against_target(self.measured, self.scaling)
        self.assertEqual(got["hybrid"]["measured_comm_share"], 0.0)

    def test_table(self):
        got = target_cluster.against_target(self.measured, self.scaling)
        lines = target_cluster.target_table(got).splitlines()
        self.assertIn("allowed_by_bytes", lines[0])
        self.assertIn("measured/allowed", lines[0])
        # After a rule: mode, wire ms, target share, measured share,
        # speed-up, allowed, measured / allowed.
        self.assertEqual(
            lines[2].split(),
            ["hybrid", "1.00", "0.33", "0.20", "3.00", "2.00", "1.50"],
        )

    def test_without_the_baseline_only_shares(self):
        got = target_cluster.against_target(self.measured[:1], self.scaling)
        self.assertNotIn("allowed_speedup", got["hybrid"])
        line = target_cluster.target_table(got).splitlines()[-1]
        self.assertEqual(line.split()[-3:], ["-", "-", "-"])


if __name__ == "__main__":
    unittest.main()
