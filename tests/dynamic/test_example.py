"""examples/dynamic_embedding: `main()` with tiny flags."""

from tests.examples.main_test_case import ExampleMainTestCase


class DynamicEmbeddingExampleTest(ExampleMainTestCase):
    example = "dynamic_embedding"
    tiny = (
        "--steps=3",
        "--warmup_steps=1",
        "--batch_size=8",
        "--seq_len=2",
        "--dim=4",
        "--capacity=20",
    )

    def test_main_times_both_models_and_reports_the_table(self):
        log = self.run_main()
        self.assertRegex(log, r"static +[\d.]+ ms/step")
        self.assertRegex(log, r"dynamic +[\d.]+ ms/step")
        self.assertRegex(log, r"dynamic / static step time: [\d.]+")
        self.assertIn("'rows': ", log)
