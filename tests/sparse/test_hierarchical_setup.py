"""`hierarchy.configure`: hosts on the communicator, and when the
hierarchical exchange runs, falls back, or is left to the cost model."""

import os
from unittest import mock

import tensorflow as tf
from absl import logging

from keras_hybrid.comm import host_groups
from keras_hybrid.sparse import hierarchical_setup
from keras_hybrid.strategy.cluster import ClusterInfo
from keras_hybrid.testing import TestCase


class _Comm:
    hosts = "unset"
    hierarchical = "unset"


def _info(addresses) -> ClusterInfo:
    spec = tf.train.ClusterSpec({"worker": list(addresses)})
    return ClusterInfo(rank=0, size=len(addresses), cluster_spec=spec)


TWO_BY_TWO = ("h1:1", "h2:1", "h1:2", "h2:2")


class ConfigureTest(TestCase):
    def setUp(self):
        super().setUp()
        patch = mock.patch.dict(os.environ, {host_groups.HOSTS_ENV: ""})
        patch.start()
        self.addCleanup(patch.stop)

    def configure(self, addresses, hierarchical, engine="tf", elastic=False):
        comm = _Comm()
        hierarchical_setup.configure(
            comm, _info(addresses), engine, elastic, hierarchical
        )
        return comm

    def test_hosts_from_addresses_and_choice(self):
        for choice in (True, False, None):
            comm = self.configure(TWO_BY_TWO, choice)
            self.assertEqual(comm.hosts.host_of, (0, 1, 0, 1))
            self.assertIs(comm.hierarchical, choice)

    def test_one_host_falls_back_with_a_warning(self):
        with mock.patch.object(logging, "warning") as warning:
            comm = self.configure(("h:1", "h:2"), True)
        self.assertIsNone(comm.hosts)
        self.assertIs(comm.hierarchical, False)
        self.assertIn("one host", warning.call_args[0][2])

    def test_unequal_hosts_fall_back(self):
        comm = self.configure(("a:1", "a:2", "b:1"), None)
        self.assertIsNone(comm.hosts)
        self.assertIs(comm.hierarchical, False)

    def test_elastic_and_horovod_are_flat(self):
        for kwargs in ({"engine": "horovod"}, {"elastic": True}):
            comm = self.configure(TWO_BY_TWO, True, **kwargs)
            self.assertIsNone(comm.hosts)
            self.assertIs(comm.hierarchical, False)

    def test_override_places_local_workers_on_hosts(self):
        local = ("localhost:1", "localhost:2", "localhost:3", "localhost:4")
        with mock.patch.dict(os.environ, {host_groups.HOSTS_ENV: "a,a,b,b"}):
            comm = self.configure(local, True)
        self.assertEqual(comm.hosts.local_of, (0, 1, 0, 1))
        self.assertIs(comm.hierarchical, True)
