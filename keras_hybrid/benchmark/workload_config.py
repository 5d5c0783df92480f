"""The benchmark's workload names and sizes, without TensorFlow (the
command lines' flags and `--help` read them)."""

import dataclasses

WORKLOADS = ("lm", "recommender", "dense")


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    """Sizes of the workloads. Batch sizes are per worker.

    Args:
        steps: Int. Global batches in the dataset. Defaults to `20`.
        seed: Int. Seed of the data. Defaults to `0`.
        zipf: Float. Exponent s of p(k) ~ 1 / (k + 1)**s for every id.
            Defaults to `1.1`.
        vocab: Int. `lm` vocabulary. Defaults to `100_000`.
        dim: Int. Embedding width of every table. Defaults to `64`.
        hidden: Int. `lm` GRU units, and the width of the MLPs of
            `recommender` and `dense`. Defaults to `128`.
        seq_len: Int. `lm` tokens per sequence. Defaults to `20`.
        num_sampled: Int. `lm` negative classes per sequence. Defaults to
            `64`.
        batch_per_worker: Int. Examples (sequences for `lm`) per worker
            and step. Defaults to `32`.
        table_rows: Tuple of ints. `recommender` table sizes, one per
            categorical feature. Defaults to 8 tables from 200k to 4 rows.
        dense_layers: Int. Hidden layers of the `dense` MLP. Defaults to
            `4`.
    """

    steps: int = 20
    seed: int = 0
    zipf: float = 1.1
    vocab: int = 100_000
    dim: int = 64
    hidden: int = 128
    seq_len: int = 20
    num_sampled: int = 64
    batch_per_worker: int = 32
    table_rows: tuple = (200_000, 50_000, 20_000, 5_000, 1_000, 100, 10, 4)
    dense_layers: int = 4

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            values = value if field.name == "table_rows" else (value,)
            if field.name in ("seed", "zipf"):
                continue
            if not values or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1
                for v in values
            ):
                raise ValueError(
                    f"`{field.name}` must be a positive int (a non-empty "
                    f"tuple of them for table_rows). Received: "
                    f"{field.name}={value!r}"
                )
