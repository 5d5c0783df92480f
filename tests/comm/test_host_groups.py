"""`host_groups`: host index and local rank of each worker."""

import os
from unittest import mock

import tensorflow as tf

from keras_hybrid.comm import host_groups
from keras_hybrid.testing import TestCase


class HostGroupsTest(TestCase):
    def test_interleaved_hosts(self):
        groups, reason = host_groups.from_hosts(["a", "b", "a", "b"])
        self.assertEqual(reason, "")
        self.assertEqual(groups.host_of, (0, 1, 0, 1))
        self.assertEqual(groups.local_of, (0, 0, 1, 1))
        self.assertEqual((groups.num_hosts, groups.per_host), (2, 2))
        self.assertEqual(groups.rank_of(1, 1), 3)
        self.assertEqual(groups.host_peers(2), (0, 2))
        self.assertEqual(groups.rank_peers(2), (2, 3))
        # Owner 3 (host b, local 1): host a relays through rank 2, host b
        # through rank 3 itself.
        self.assertEqual(groups.relay_of()[3], (2, 3))
        self.assertEqual(groups.relay_of()[0], (0, 1))

    def test_flat_cases_say_why(self):
        cases = {
            ("a", "a", "a"): "one host",
            ("a", "b"): "one worker",
            ("a", "a", "b"): "unequal",
            ("a",): "one host",
        }
        for hosts, why in cases.items():
            groups, reason = host_groups.from_hosts(list(hosts))
            self.assertIsNone(groups, hosts)
            self.assertIn(why, reason, hosts)

    def test_rank_of_unknown_worker_raises(self):
        groups, _ = host_groups.from_hosts(["a", "b", "a", "b"])
        with self.assertRaisesRegex(ValueError, "No worker is local rank 2"):
            groups.rank_of(0, 2)

    def test_host_part_of_cluster_addresses(self):
        spec = tf.train.ClusterSpec(
            {"worker": ["10.0.0.1:2222", "10.0.0.1:2223", "[::1]:5", "h"]}
        )
        with mock.patch.dict(os.environ, {host_groups.HOSTS_ENV: ""}):
            names = host_groups.host_names(spec, "worker", 4)
        self.assertEqual(names, ["10.0.0.1", "10.0.0.1", "::1", "h"])

    def test_override(self):
        spec = tf.train.ClusterSpec({"worker": ["x:1", "x:2"]})
        with mock.patch.dict(os.environ, {host_groups.HOSTS_ENV: "a, b"}):
            self.assertEqual(
                host_groups.host_names(spec, "worker", 2), ["a", "b"]
            )
        with mock.patch.dict(os.environ, {host_groups.HOSTS_ENV: "a,b,c"}):
            with self.assertRaisesRegex(ValueError, "one host per worker"):
                host_groups.host_names(spec, "worker", 2)
