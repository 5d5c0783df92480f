"""Absl flags of the workload sizes, shared by the CLI and its workers."""

from absl import flags

from keras_hybrid.benchmark import workload_config as workloads

_DEFAULTS = workloads.WorkloadConfig()
# Flag name -> WorkloadConfig field; all ints except zipf and table_rows.
_INT_FIELDS = (
    "seed",
    "vocab",
    "dim",
    "hidden",
    "seq_len",
    "num_sampled",
    "batch_per_worker",
    "dense_layers",
)
PASSED_TO_WORKERS = (
    "workload",
    "warmup_steps",
    "steps",
    "zipf",
    "table_rows",
    "hot_rows",
    "hot_every",
)
PASSED_TO_WORKERS += _INT_FIELDS


def define_flags() -> None:
    """Defines `--workload`, `--steps`, `--warmup_steps` and the sizes."""
    flags.DEFINE_enum(
        "workload", "lm", workloads.WORKLOADS, "Model and data to train."
    )
    flags.DEFINE_integer(
        "steps", 20, "Measured train steps per mode.", lower_bound=1
    )
    flags.DEFINE_integer(
        "warmup_steps",
        3,
        "Steps run before measuring (tracing, first collectives).",
        lower_bound=1,
    )
    flags.DEFINE_float(
        "zipf", _DEFAULTS.zipf, "Exponent of the Zipf law of every id."
    )
    flags.DEFINE_list(
        "table_rows",
        [str(r) for r in _DEFAULTS.table_rows],
        "recommender: rows of each embedding table.",
    )
    flags.DEFINE_integer(
        "hot_rows",
        0,
        "Hot rows: rows of each partitioned table served to "
        "every worker by an all-reduce, their gradients all-reduced "
        "(HybridStrategy(hot_rows=)). The benchmark's hybrid_hot mode needs "
        "it > 0; the simulator models it, taking ids as Zipf(--zipf) to "
        "split hot from cold.",
        lower_bound=0,
    )
    flags.DEFINE_integer(
        "hot_every",
        10,
        "Mode hybrid_hot: steps between two choices of hot rows; they are "
        "also chosen once after the warm-up.",
        lower_bound=1,
    )
    helps = {
        "seed": "Seed of the data and of the model.",
        "vocab": "lm: vocabulary size (rows of both tables).",
        "dim": "Embedding width (lm input table, recommender tables).",
        "hidden": "lm GRU units (and softmax width); MLP width otherwise.",
        "seq_len": "lm: tokens per sequence.",
        "num_sampled": "lm: sampled negative classes per sequence.",
        "batch_per_worker": "Examples per worker and step.",
        "dense_layers": "dense: hidden layers of the MLP.",
    }
    for name in _INT_FIELDS:
        flags.DEFINE_integer(
            name,
            getattr(_DEFAULTS, name),
            helps[name],
            lower_bound=0 if name == "seed" else 1,
        )


def config_from_flags(values) -> workloads.WorkloadConfig:
    """The `WorkloadConfig` of parsed flags, with warm-up + measured steps.

    Raises:
        ValueError: If `--table_rows` has a non-integer entry.
    """
    try:
        rows = tuple(int(r) for r in values.table_rows)
    except ValueError as error:
        raise ValueError(
            "`--table_rows` must be a comma-separated list of ints. "
            f"Received: --table_rows={','.join(values.table_rows)}"
        ) from error
    sizes = {name: getattr(values, name) for name in _INT_FIELDS}
    return workloads.WorkloadConfig(
        steps=values.warmup_steps + values.steps,
        zipf=values.zipf,
        table_rows=rows,
        **sizes,
    )


def worker_argv(values) -> list[str]:
    """The flags above as `--name=value` strings for a worker command."""
    out = []
    for name in PASSED_TO_WORKERS:
        value = getattr(values, name)
        if isinstance(value, list):
            value = ",".join(value)
        out.append(f"--{name}={value}")
    return out
