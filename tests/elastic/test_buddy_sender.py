"""`BuddySender`: buddy copies sent over real sockets between three
members in this process (the collective that exchanges the receivers'
ports is a stand-in), on the table of `test_buddy_store` (12 rows of 2
columns whose value is the row id, 12 one-row virtual shards over the
tasks [0, 1, 2]). The multi-process runs are in
`test_lost_worker_multiprocess.py` and `test_survive_multiprocess.py`."""

import numpy as np

from keras_hybrid.contract import commit_blob
from keras_hybrid.elastic import buddy_store
from keras_hybrid.elastic.buddy_sender import BuddyCopyError
from keras_hybrid.elastic.buddy_sender import BuddySender
from keras_hybrid.sharding.row_partition import RowPartition
from keras_hybrid.testing import TestCase

MEMBERS = [0, 1, 2]
PARTITION = RowPartition.create(12, 3)
TABLE = np.repeat(np.arange(12, dtype="float32")[:, None], 2, axis=1)


class _Shard:
    """A stand-in for one task's `ShardedTable`: the rows of its ids."""

    def __init__(self, task: int):
        self.path = "items/embeddings"
        self.partition = PARTITION
        self.value = TABLE[PARTITION.ids_on_shard(task)].copy()

    def stored_tensor_shared(self):
        return self.value


class _Membership:
    def __init__(self, task: int, copies: int = 1, hosts=None):
        self.task = task
        self.members = list(MEMBERS)
        self.generation = 0
        self.buddy_copies = copies
        self.buddy_receiver = None
        self.hosts = hosts or {}

    def host_of(self, task):
        return self.hosts.get(task, "127.0.0.1")


class _Stats:
    def __init__(self):
        self.recorded = []

    def record(self, path, num_bytes, calls=1, received_bytes=None):
        self.recorded.append((path, num_bytes, received_bytes))


class _Bus:
    """Sums what every member gives to the exchange (all three take their
    commit one after the other in this thread, so the sum is made from
    every sender's receiver up front)."""

    def __init__(self):
        self.senders = []

    def total(self):
        rows = np.zeros([len(MEMBERS), 3], np.int64)
        for sender in self.senders:
            key = np.frombuffer(sender.receiver.authkey, np.int64)
            task = MEMBERS.index(sender._membership.task)
            rows[task] = [sender.receiver.port, *key]
        return rows.reshape(-1)


class _Communicator:
    def __init__(self, bus: _Bus, task: int):
        self.bus, self.task = bus, task
        self.stats = _Stats()
        self.exchanges = 0

    def all_reduce(self, tensors, op, path):
        (mine,) = tensors
        total = self.bus.total()
        # This member's own row is what it gave.
        own = np.asarray(mine).reshape(len(MEMBERS), 3)[self.task]
        np.testing.assert_array_equal(
            own, total.reshape(len(MEMBERS), 3)[self.task]
        )
        self.exchanges += 1
        return [total]


class BuddySenderTest(TestCase):
    def setUp(self):
        super().setUp()
        self._start()

    def _start(self, hosts=None):
        self.bus = _Bus()
        self.shards = {t: _Shard(t) for t in MEMBERS}
        self.senders = {}
        for task in MEMBERS:
            sender = BuddySender(
                _Membership(task, hosts=hosts), _Communicator(self.bus, task)
            )
            self.bus.senders.append(sender)
            self.senders[task] = sender

    def tearDown(self):
        for sender in self.senders.values():
            sender.receiver.close()
        super().tearDown()

    def _commit(self, step: int, keep=(), generation: int = 0) -> dict:
        commits = {
            t: s.take([self.shards[t]], MEMBERS, step, generation, list(keep))
            for t, s in self.senders.items()
        }
        for sender in self.senders.values():
            sender.wait()
        return commits

    def test_each_member_holds_the_rows_of_the_one_before(self):
        commits = self._commit(10)
        for task in MEMBERS:
            before = MEMBERS[(task - 1) % 3]
            (rows,) = buddy_store._received_rows(commits[task], before)
            np.testing.assert_array_equal(rows, self.shards[before].value)
            self.assertFalse(
                self.senders[task].receiver.exists("commit-10-g0", task)
            )
        # Task 1 lost: task 2 takes its rows, from the copy it received.
        for task in (0, 2):
            self.assertTrue(buddy_store.restorable(commits[task], [0, 2], task))
        (lost,) = buddy_store._lost_rows(commits[2], [0, 2], 2)
        np.testing.assert_array_equal(lost[1], self.shards[1].value)
        self.assertEqual(buddy_store._lost_rows(commits[0], [0, 2], 0), [{}])
        # The bytes: 4 rows of 2 float32 sent, and 4 received.
        stats = self.senders[0]._comm.stats.recorded
        self.assertEqual(stats, [("commit", 32, 32)])
        self.assertEqual(commits[0]["bytes"], 32)
        # One host: each copy was written into its buddy's memory.
        for sender in self.senders.values():
            self.assertEqual(
                sender.receiver.arrivals, {"mapped": 1, "streamed": 0}
            )

    def test_a_buddy_the_cluster_names_on_another_host_gets_a_stream(self):
        for sender in self.senders.values():
            sender.receiver.close()
        # Task 0 is "localhost" and the others "127.0.0.1": names of one
        # machine, but two hosts as the cluster names them.
        self._start(hosts={0: "localhost"})
        commits = self._commit(10)
        arrivals = {t: s.receiver.arrivals for t, s in self.senders.items()}
        self.assertEqual(arrivals[1], {"mapped": 0, "streamed": 1})  # from 0
        self.assertEqual(arrivals[2], {"mapped": 1, "streamed": 0})  # from 1
        self.assertEqual(arrivals[0], {"mapped": 0, "streamed": 1})  # from 2
        (rows,) = buddy_store._received_rows(commits[1], 0)
        np.testing.assert_array_equal(rows, self.shards[0].value)

    def test_a_copy_a_buddy_maps_is_never_written_again(self):
        kept = {}  # task 1's copy of task 0's rows, by folder
        for step in range(6):
            folder = f"commit-{step}-g0"
            keep = [f"commit-{step - 1}-g0"] if step else []
            self.shards[0].value = TABLE[PARTITION.ids_on_shard(0)] + step
            self._commit(step, keep=keep)
            kept[folder] = self.shards[0].value.copy()
            receiver = self.senders[1].receiver
            for held in receiver.folders(0):
                (rows,) = commit_blob.read_blob(receiver.read(held, 0))
                np.testing.assert_array_equal(rows, kept[held])
        # Two kept commits and one a buddy still mapped: three buffers.
        self.assertEqual(len(self.senders[0]._blobs), 3)

    def test_the_copy_is_the_rows_at_the_commit(self):
        sender = self.senders[0]
        commit = sender.take([self.shards[0]], MEMBERS, 10, 0, [])
        # The next step changes the rows while the copy travels.
        self.shards[0].value += 100.0
        sender.wait()
        received = self.senders[1].receiver.read("commit-10-g0", 0)
        self.assertIsNotNone(received)
        (rows,) = buddy_store._received_rows(
            {**commit, "files": self.senders[1].receiver}, 0
        )
        np.testing.assert_array_equal(rows, TABLE[PARTITION.ids_on_shard(0)])
        np.testing.assert_array_equal(commit["tables"][0].own, rows)

    def test_receivers_are_learned_once_per_generation(self):
        self._commit(0)
        self._commit(10, keep=["commit-0-g0"])
        self.assertEqual(self.senders[0]._comm.exchanges, 1)
        self._commit(11, keep=["commit-10-g0"], generation=1)
        self.assertEqual(self.senders[0]._comm.exchanges, 2)
        self.assertEqual(
            self.senders[1].receiver.folders(0),
            ["commit-10-g0", "commit-11-g1"],
        )

    def test_a_copy_that_did_not_arrive_leaves_the_commit_before(self):
        first = self._commit(10)
        # Task 0 dies while sending its next copy: its buddy never holds it.
        second = {
            t: self.senders[t].take([self.shards[t]], MEMBERS, 20, 0, [])
            for t in (1, 2)
        }
        for t in (1, 2):
            self.senders[t].wait()
        survivors = [1, 2]
        self.assertFalse(buddy_store.restorable(second[1], survivors, 1))
        self.assertTrue(buddy_store.restorable(second[2], survivors, 2))
        self.assertTrue(buddy_store.restorable(first[1], survivors, 1))
        with self.assertRaisesRegex(
            NotImplementedError, r"buddy copy of commit-20-g0 did not arrive"
        ):
            buddy_store._lost_rows(second[1], survivors, 1)

    def test_a_failed_send_stops_training_unless_its_buddy_was_lost(self):
        self._commit(0)
        self.senders[1].receiver.close()
        sender = self.senders[0]
        sender.take([self.shards[0]], MEMBERS, 10, 0, ["commit-0-g0"])
        with self.assertRaisesRegex(
            BuddyCopyError, "could not send its buddy copy .* to task 1"
        ):
            sender.wait()
        # The same failure once task 1 is no longer a member: the
        # recovery's business, not an error of the next commit.
        sender.take([self.shards[0]], MEMBERS, 20, 0, ["commit-10-g0"])
        sender._membership.members = [0, 2]
        sender.wait()
        # Nor once the members changed since the send, even if a joiner
        # took task 1's id back (a recovery, then a grow).
        sender._membership.members = list(MEMBERS)
        sender.take([self.shards[0]], MEMBERS, 30, 0, ["commit-20-g0"])
        sender._membership.generation = 2
        sender.wait()
