"""`ClusterSpec` and the tc-style rate and time parsers."""

import unittest

from keras_hybrid.costs.cluster_spec import ClusterSpec
from keras_hybrid.costs.cluster_spec import parse_rate
from keras_hybrid.costs.cluster_spec import parse_time


class ParseTest(unittest.TestCase):
    def test_rates_in_bytes_per_second(self):
        self.assertEqual(parse_rate("10gbit"), 1.25e9)
        self.assertEqual(parse_rate("100Mbit"), 12.5e6)
        self.assertEqual(parse_rate("1gbps"), 1e9)

    def test_times_in_seconds(self):
        self.assertAlmostEqual(parse_time("50us"), 50e-6)
        self.assertAlmostEqual(parse_time("1.5ms"), 1.5e-3)
        self.assertEqual(parse_time("0"), 0.0)

    def test_bad_rates_and_times(self):
        for text in ("fast", "10", "0gbit", "-1mbit"):
            with self.assertRaisesRegex(ValueError, "rate must be", msg=text):
                parse_rate(text)
        for text in ("5", "1 hour", "-3us"):
            with self.assertRaisesRegex(ValueError, "time must be", msg=text):
                parse_time(text)


class ClusterSpecTest(unittest.TestCase):
    def test_hosts_and_ring_link(self):
        spec = ClusterSpec(64, 8, inter_bandwidth=3.0, intra_bandwidth=9.0)
        self.assertEqual(spec.hosts, 8)
        self.assertEqual(spec.ring_link(), (spec.inter_latency, 3.0))
        one_host = spec.with_workers(4)
        self.assertEqual(one_host.accelerators_per_host, 4)
        self.assertEqual(one_host.ring_link(), (one_host.intra_latency, 9.0))

    def test_ring_is_as_slow_as_its_slowest_hop(self):
        # In-host hops slower than the host link: they bound the ring.
        spec = ClusterSpec(64, 8, inter_bandwidth=9.0, intra_bandwidth=3.0)
        self.assertEqual(spec.ring_link(), (spec.inter_latency, 3.0))
        # One worker per host: there are no in-host hops.
        spec = ClusterSpec(8, 1, inter_bandwidth=9.0, intra_bandwidth=3.0)
        self.assertEqual(spec.ring_link(), (spec.inter_latency, 9.0))

    def test_rejects_bad_values(self):
        with self.assertRaisesRegex(ValueError, "must divide `workers`"):
            ClusterSpec(12, 8)
        with self.assertRaisesRegex(ValueError, "`workers` must be >= 1"):
            ClusterSpec(0)
        with self.assertRaisesRegex(TypeError, "`workers` must be an int"):
            ClusterSpec(2.0)
        with self.assertRaisesRegex(ValueError, "`inter_bandwidth` must be"):
            ClusterSpec(2, inter_bandwidth=0)
        with self.assertRaisesRegex(ValueError, "`intra_latency` must be"):
            ClusterSpec(2, intra_latency=-1e-6)
