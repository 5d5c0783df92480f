"""`--netem` parsing, and namespaces that go away after success, failure,
and on every error path (as root; this machine runs tests as root)."""

import os
import subprocess
import sys
import unittest
from unittest import mock

import pytest

from keras_hybrid.emulation import network as netem

pytestmark = pytest.mark.netns


def namespaces() -> set[str]:
    out = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True
    ).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def links() -> set[str]:
    out = subprocess.run(
        ["ip", "-o", "link"], capture_output=True, text=True
    ).stdout
    return {
        line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
    }


def qdisc_of(net, rank: int = 0) -> str:
    return subprocess.run(
        net.wrap(rank, ["tc", "qdisc", "show", "dev", "eth0"]),
        capture_output=True,
        text=True,
    ).stdout


class ParseTest(unittest.TestCase):
    def test_parses_rates_and_delays(self):
        self.assertEqual(
            netem.parse("10gbit:50us"), netem.NetemSpec("10gbit", 50)
        )
        self.assertEqual(
            netem.parse("1Gbit:2ms"), netem.NetemSpec("1gbit", 2000)
        )
        self.assertEqual(netem.parse("500mbit:0").delay_us, 0)
        self.assertEqual(netem.parse("10gbit:0").bits_per_second, 1e10)

    def test_bad_specs(self):
        for bad in ("10gbit", "fast:1us", "10gb:1us", "0gbit:1us", "1gbit:x"):
            with self.assertRaisesRegex(ValueError, "BANDWIDTH:LATENCY"):
                netem.parse(bad)

    def test_tbf_queue_must_be_positive(self):
        with self.assertRaisesRegex(ValueError, "tbf_queue_ms.*Received: 0"):
            netem.EmulatedNetwork(2, netem.parse("1gbit:0"), tbf_queue_ms=0)

    def test_not_root_is_a_clear_error(self):
        with mock.patch.object(os, "geteuid", return_value=1000):
            with self.assertRaisesRegex(PermissionError, "needs root.*1000"):
                with netem.EmulatedNetwork(2, netem.parse("1gbit:0")):
                    pass

    def test_each_network_has_its_own_names(self):
        # A second network in one run (the benchmark's calibration, then its
        # measurement) must not reuse names the kernel may still hold.
        first = netem.EmulatedNetwork(2, None)
        second = netem.EmulatedNetwork(2, None)
        self.assertNotEqual(first.bridge, second.bridge)
        self.assertTrue(set(first.host_links).isdisjoint(second.host_links))
        longest = netem.EmulatedNetwork(netem.MAX_WORKERS, None)
        # Linux interface names have at most 15 characters.
        self.assertLessEqual(max(map(len, longest.host_links)), 15)


@unittest.skipUnless(os.geteuid() == 0, "needs root")
class NamespaceTest(unittest.TestCase):
    def test_created_reachable_and_removed(self):
        with netem.EmulatedNetwork(2, netem.parse("1gbit:0"), tag="t1") as net:
            self.assertLessEqual(set(net.namespaces), namespaces())
            self.assertIn(net.bridge, links())
            # Worker 0 reaches worker 1's address through the bridge.
            probe = (
                "import socket; s = socket.create_connection(("
                f"'{net.addresses[1]}', 9), timeout=5)"
            )
            result = subprocess.run(
                net.wrap(0, [sys.executable, "-c", probe]),
                capture_output=True,
                text=True,
            )
            # Nothing listens on port 9: refused means the packet arrived.
            self.assertIn("ConnectionRefusedError", result.stderr)
            self.assertIn("1Gbit", qdisc_of(net))
        self.assertFalse(set(net.namespaces) & namespaces())
        self.assertNotIn(net.bridge, links())
        # Gone at once, not when the kernel frees the namespaces.
        self.assertFalse(set(net.host_links) & links())

    def test_tbf_queue_sets_the_bucket_latency(self):
        net = netem.EmulatedNetwork(
            2, netem.parse("1gbit:0"), tag="t4", tbf_queue_ms=400
        )
        with net:
            if net.qdisc_kind == "tbf":
                self.assertIn("lat 400ms", qdisc_of(net))

    def test_removed_after_an_exception(self):
        net = netem.EmulatedNetwork(3, netem.parse("1gbit:0"), tag="t2")
        with self.assertRaisesRegex(KeyError, "boom"):
            with net:
                self.assertLessEqual(set(net.namespaces), namespaces())
                raise KeyError("boom")
        self.assertFalse(set(net.namespaces) & namespaces())
        self.assertNotIn(net.bridge, links())

    def test_delay_needs_netem_or_fails_clean(self):
        net = netem.EmulatedNetwork(2, netem.parse("1gbit:50us"), tag="t3")
        if netem._has_netem():
            with net:
                self.assertIn("delay 50us", qdisc_of(net))
        else:
            with self.assertRaisesRegex(RuntimeError, "sch_netem.*1gbit:0"):
                with net:
                    pass
        self.assertFalse(set(net.namespaces) & namespaces())
        self.assertNotIn(net.bridge, links())
