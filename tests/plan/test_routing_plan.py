"""The routing plan: classification, overrides and layout."""

from keras_hybrid.plan import make_plan
from keras_hybrid.testing import TestCase

VARIABLES = [
    ("embedding/embeddings", (1000, 16), 4, "layer"),
    ("softmax/weights", (1000, 32), 4, "gradient"),
    ("dense/kernel", (16, 8), 4, None),
    ("dense/bias", (8,), 4, None),
]


class RoutingPlanTest(TestCase):
    def test_default_classification_and_sizes(self):
        plan = make_plan(VARIABLES, num_shards=4)
        self.assertEqual(
            [v.kind for v in plan.variables],
            ["sparse", "sparse", "dense", "dense"],
        )
        table = plan["embedding/embeddings"]
        self.assertEqual(table.bytes, 1000 * 16 * 4)
        self.assertEqual(table.bytes_per_worker(), 250 * 16 * 4)
        self.assertEqual(plan["dense/kernel"].bytes_per_worker(), 16 * 8 * 4)
        self.assertEqual(table.partition.num_shards, 4)
        self.assertIsNone(plan["dense/bias"].partition)

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
        self.assertEqual(plan["dense/kernel"].kind, "sparse")

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
            make_plan([("step", (), 8, None)], 2, overrides={"step": "sparse"})

    def test_plan_prints_as_a_table(self):
        text = str(make_plan(VARIABLES, 4))
        self.assertIn("embedding/embeddings", text)
        self.assertIn("sparse", text)
        self.assertIn("(layer)", text)
        with self.assertRaisesRegex(KeyError, "No variable"):
            make_plan(VARIABLES, 4)["nope"]
