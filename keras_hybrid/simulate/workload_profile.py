"""Profiles of the benchmark's workloads (`keras_hybrid.benchmark`)."""

from keras_hybrid.benchmark import workloads
from keras_hybrid.simulate.profiler import profile_model

BATCHES = 4  # batches averaged per batch size for the unique-id counts


def profile_workload(
    name: str, config, warmup_steps: int = 2, timed_steps: int = 5
):
    """Profiles workload `name` at half, one and two times its batch.

    Unique ids are counted per lookup call from the inputs each table
    reads (`workloads.table_features`), on the same data the benchmark
    trains on.

    Args:
        name: String, one of `workloads.WORKLOADS`.
        config: `workloads.WorkloadConfig`.
        warmup_steps: Int. Untimed steps per batch size. Defaults to `2`.
        timed_steps: Int. Timed steps per batch size. Defaults to `5`.

    Returns:
        A `Profile` named after the workload.
    """
    model, _ = workloads.build(name, config, 1)
    b = config.batch_per_worker
    batch_sizes = tuple(sorted({max(1, b // 2), b, 2 * b}))
    x, y = workloads.make_arrays(name, config, max(batch_sizes) * BATCHES)

    def make_batch(size, index):
        rows = slice(index * size, (index + 1) * size)
        return {k: v[rows] for k, v in x.items()}, y[rows]

    call_inputs = {
        model.get_layer(layer).embeddings.path: inputs
        for layer, (_, _, inputs) in workloads.table_features(
            name, config
        ).items()
    }
    return profile_model(
        model,
        make_batch,
        batch_sizes,
        batches=BATCHES,
        timed_steps=timed_steps,
        warmup_steps=warmup_steps,
        name=name,
        call_inputs=call_inputs,
    )
