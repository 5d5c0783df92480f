"""The routing plan: decisions by use and cost, overrides and layout."""

from keras_hybrid.plan import cost_rule
from keras_hybrid.plan import make_plan
from keras_hybrid.plan.variable_facts import VariableFacts
from keras_hybrid.testing import TestCase

# Latency 0: bytes alone decide, so figures can be checked by hand.
BYTES_ONLY = cost_rule.Link(bandwidth="1gbit", latency="0")
VARIABLES = [
    VariableFacts("embedding/embeddings", (1000, 16), 4, True, "gathered", 64),
    VariableFacts("softmax/weights", (1000, 32), 4, True, "gathered", 64),
    VariableFacts(
        "tied/embeddings",
        (1000, 16),
        4,
        True,
        "whole",
        0,
        "read whole by MatMul",
    ),
    VariableFacts("pending/embeddings", (1000, 16), 4, True),
    VariableFacts("dense/kernel", (16, 8), 4),
    VariableFacts("dense/bias", (8,), 4),
]


class RoutingPlanTest(TestCase):
    def test_decisions_by_use_and_sizes(self):
        plan = make_plan(VARIABLES, num_shards=4, link=BYTES_ONLY)
        self.assertEqual(
            [(v.kind, v.source) for v in plan.variables],
            [
                ("sparse", "gathered"),
                ("sparse", "gathered"),
                ("dense", "read whole"),
                ("sparse", "provisional"),
                ("dense", "not a table"),
                ("dense", "small"),
            ],
        )
        table = plan["embedding/embeddings"]
        self.assertEqual(table.bytes, 1000 * 16 * 4)
        self.assertEqual(table.bytes_per_worker(), 250 * 16 * 4)
        self.assertEqual(plan["dense/kernel"].bytes_per_worker(), 16 * 8 * 4)
        self.assertEqual(table.partition.num_shards, 4)
        self.assertIsNone(plan["dense/bias"].partition)
        self.assertIn("MatMul", plan["tied/embeddings"].reason)

    def test_an_elastic_joiner_decides_the_members_kinds(self):
        """A joiner (one shard until admitted) weighs kinds for the job's
        most workers, as the members do: the same kinds, its own layout."""
        members = make_plan(
            VARIABLES, 2, link=BYTES_ONLY, min_rows=4, workers=4
        )
        joiner = make_plan(VARIABLES, 1, link=BYTES_ONLY, min_rows=4, workers=4)
        kinds = [(v.kind, v.source) for v in members.variables]
        self.assertEqual([(v.kind, v.source) for v in joiner.variables], kinds)
        self.assertIn(("sparse", "gathered"), kinds)
        self.assertEqual(joiner["embedding/embeddings"].partition.num_shards, 1)
        # Weighed for its one shard it would keep the tables dense.
        alone = make_plan(VARIABLES, 1, link=BYTES_ONLY, min_rows=4)
        self.assertNotIn(
            ("sparse", "gathered"),
            [(v.kind, v.source) for v in alone.variables],
        )

    def test_cost_figures_by_hand(self):
        plan_cost = make_plan(VARIABLES, 4, link=BYTES_ONLY)
        cost = plan_cost["embedding/embeddings"].cost
        # 64 lookups of 1000 rows: u = min(64, 1000) ids; 3/4 of them go
        # to other shards, each an 8-byte id and two 64-byte rows (pull and
        # push). The simulator adds the padding of each all-to-all block to
        # the largest pair count, and the count exchange.
        self.assertEqual(cost.unique, 64)
        payload = 64 * 3 / 4 * (8 + 2 * 64)
        self.assertGreater(cost.sparse_bytes, payload)
        self.assertLess(cost.sparse_bytes, 1.6 * payload)
        # Replicated: all-gather of 64 rows + ids (summed per id first) to
        # 3 peers, 13824 bytes before padding to the capacity ladder, far
        # below the all-reduce of the table, 2 x 3/4 x 64000 = 96000.
        self.assertEqual(cost.dense_sync, "allgather_unique")
        self.assertGreaterEqual(cost.dense_bytes, 3 * 64 * (64 + 8))
        self.assertLess(cost.dense_bytes, 96000)
        self.assertTrue(cost.partition)

    def test_a_gathered_gradient_is_priced_at_its_distinct_ids(self):
        # Each worker sums its rows per id before the all-gather, so 16
        # distinct ids among 64 lookups send a quarter of the rows.
        every = cost_rule.table_cost(10**5, 64, 64, 2, BYTES_ONLY, unique=64)
        repeated = cost_rule.table_cost(10**5, 64, 64, 2, BYTES_ONLY, unique=16)
        self.assertEqual(repeated.dense_sync, "allgather_unique")
        # Rows and ids to the one peer, and the two 4-byte row counts.
        self.assertEqual(repeated.dense_bytes, 16 * (64 + 8) + 2 * 4)
        self.assertEqual(every.dense_bytes, 64 * (64 + 8) + 2 * 4)

    def test_table_read_in_full_every_step_stays_dense(self):
        position = VariableFacts("pos/embeddings", (200, 64), 4, True)
        for link in (BYTES_ONLY, cost_rule.Link()):
            # [batch, 200] position ids: every row, every step.
            facts = VariableFacts(
                "pos/embeddings", (200, 64), 4, True, "gathered", 128 * 200
            )
            entry = make_plan([facts], 4, link=link)["pos/embeddings"]
            self.assertEqual((entry.kind, entry.source), ("dense", "cost"))
            self.assertEqual(entry.cost.dense_sync, "allreduce")
        # Before use is known, such a table is provisional only if some
        # number of lookups could make partitioning pay.
        self.assertEqual(
            make_plan([position], 4)["pos/embeddings"].source, "provisional"
        )

    def test_distinct_ids_gain_from_three_workers_on(self):
        # With as many distinct ids as lookups, 2 workers move about as
        # many bytes partitioned as all-gathered, in about the same time:
        # a tie, which goes to partitioning only if it sends no more bytes.
        for workers in (2, 3, 4):
            facts = VariableFacts(
                "t/embeddings", (200_000, 8), 4, True, "gathered", 64
            )
            entry = make_plan([facts], workers)["t/embeddings"]
            cost = entry.cost
            if workers == 2:
                self.assertTrue(cost.tie, entry.reason)
                no_more = cost.sparse_bytes <= cost.dense_bytes
                self.assertEqual(entry.kind == "sparse", no_more)
            else:
                self.assertEqual(entry.kind, "sparse", entry.reason)
                self.assertLess(cost.sparse_bytes, cost.dense_bytes)

    def test_a_tie_goes_to_partitioning_if_it_sends_no_more_bytes(self):
        def cost(sparse_ms, dense_ms, sparse_kb, dense_kb):
            return cost_rule.TableCost(
                64,
                64,
                sparse_kb * 1e3,
                sparse_ms / 1e3,
                dense_kb * 1e3,
                dense_ms / 1e3,
                "allgather_unique",
                10**6,
                3,
            )

        # 2% slower, fewer bytes: a tie, partitioned; the margin is shown.
        tie = cost(1.02, 1.00, 8.2, 8.6)
        self.assertTrue(tie.tie)
        self.assertTrue(tie.partition)
        self.assertIn("a tie", tie.summary())
        self.assertIn("+2.0%", tie.summary())
        self.assertIn("1/3 of the memory", tie.summary())
        # The same times but more bytes: replicated, the faster.
        self.assertFalse(cost(1.02, 1.00, 8.7, 8.6).partition)
        # 6% slower is no tie, whatever the bytes.
        self.assertFalse(cost(1.06, 1.00, 1.0, 8.6).partition)
        # 3% faster with more bytes: the faster way, partitioned.
        faster = cost(0.97, 1.00, 9.0, 8.6)
        self.assertTrue(faster.partition)
        self.assertNotIn("a tie", faster.summary())
        self.assertIn("-3.0%", faster.summary())

    def test_huge_tables_are_partitioned(self):
        rows = cost_rule.REPLICA_BYTES_LIMIT // 512 + 1
        facts = VariableFacts("big", (rows, 128), 4, True, "gathered", 8)
        entry = make_plan([facts], 2)["big"]
        self.assertEqual(entry.kind, "sparse")
        self.assertIn("too big to replicate", entry.reason)

    def test_exact_override_beats_regex(self):
        plan = make_plan(
            VARIABLES,
            num_shards=2,
            overrides={
                ".*/embeddings": "dense",
                "embedding/embeddings": "sparse",
                "dense/.*": "sparse",
            },
        )
        self.assertEqual(plan["embedding/embeddings"].kind, "sparse")
        self.assertEqual(plan["embedding/embeddings"].source, "override")
        self.assertEqual(plan["tied/embeddings"].kind, "dense")
        self.assertEqual(plan["dense/kernel"].kind, "sparse")

    def test_tables_with_fewer_rows_than_max_workers_stay_dense(self):
        # An elastic job of 2 workers that may grow to 4 (the position
        # table of a Transformer, 2 rows, matched by `.*embeddings`): a
        # grow could not give each of 4 workers a row, so it stays dense
        # from the start, override or not.
        position = VariableFacts("pos/embeddings", (2, 8), 4, True)
        token = VariableFacts("tok/embeddings", (4, 8), 4, True)
        overrides = {".*embeddings": "sparse"}
        plan = make_plan([position, token], 2, overrides, min_rows=4)
        self.assertEqual(plan["pos/embeddings"].kind, "dense")
        self.assertEqual(plan["pos/embeddings"].source, "too few rows")
        self.assertEqual(
            plan["pos/embeddings"].reason,
            "replicated: 2 rows for up to 4 workers (elastic --max-np) "
            "(an embedding table)",
        )
        self.assertEqual(plan["tok/embeddings"].kind, "sparse")
        fixed = make_plan([position], 2, overrides)
        self.assertEqual(fixed["pos/embeddings"].kind, "sparse")

    def test_regex_must_full_match(self):
        plan = make_plan(VARIABLES, 2, overrides={"dense": "sparse"})
        self.assertEqual(plan["dense/kernel"].kind, "dense")

    def test_two_matching_patterns_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "more than one override"):
            make_plan(
                VARIABLES,
                2,
                overrides={"dense/.*": "sparse", ".*/kernel": "dense"},
            )

    def test_bad_overrides(self):
        with self.assertRaisesRegex(ValueError, "must be one of"):
            make_plan(VARIABLES, 2, overrides={"dense/.*": "ps"})
        with self.assertRaisesRegex(ValueError, "valid regex"):
            make_plan(VARIABLES, 2, overrides={"dense/(": "dense"})
        with self.assertRaisesRegex(TypeError, "must be a dict"):
            make_plan(VARIABLES, 2, overrides=[("a", "dense")])
        with self.assertRaisesRegex(ValueError, "scalar cannot be"):
            make_plan(
                [VariableFacts("step", (), 8)], 2, overrides={"step": "sparse"}
            )

    def test_bad_link(self):
        with self.assertRaisesRegex(ValueError, "rate must be"):
            cost_rule.Link(bandwidth="fast")
        with self.assertRaisesRegex(ValueError, "must be >= 0"):
            cost_rule.Link(latency=-1.0)

    def test_plan_prints_as_a_table(self):
        text = str(make_plan(VARIABLES, 4, link=BYTES_ONLY))
        self.assertLessEqual(max(map(len, text.splitlines())), 100)
        # Reasons wrap under their variable: read them as one line.
        text = " ".join(text.split())
        self.assertIn("embedding/embeddings", text)
        self.assertIn("MB/worker", text)
        # Each reason: the choice, the deciding figure, what it is.
        self.assertRegex(
            text,
            r"partitioned: [\d.]+ vs [\d.]+ ms/step replicated \(-[\d.]+%\); "
            r"[\d.]+ vs [\d.]+ kB/step",
        )
        self.assertIn("(a table read by gathers)", text)
        self.assertIn(
            "replicated: 64.0 kB, read whole by MatMul (an embedding table)",
            text,
        )
        self.assertIn(
            "replicated: 512 B, gathered nowhere (a Dense kernel)", text
        )
        self.assertIn("rows per worker 250 250 250 250", text)
        self.assertIn("provisional: no step reads it yet", text)

    def test_a_table_no_traced_step_read_says_so(self):
        plan = make_plan(VARIABLES, 4, link=BYTES_ONLY, traced=True)
        entry = plan["pending/embeddings"]
        self.assertEqual(entry.source, "provisional")
        self.assertTrue(entry.reason.startswith("unused: no step reads it"))

    def test_long_paths_fit_in_100_columns(self):
        facts = VariableFacts("a/" * 60 + "embeddings", (1000, 16), 4, True)
        text = str(make_plan([facts], 2, traced=True))
        self.assertLessEqual(max(map(len, text.splitlines())), 100)
        self.assertIn("…", text)

        with self.assertRaisesRegex(KeyError, "No variable"):
            make_plan(VARIABLES, 4)["nope"]
