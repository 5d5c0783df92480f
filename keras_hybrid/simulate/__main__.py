"""`python -m keras_hybrid.simulate`: predicted cost of every mode at scale.

    python -m keras_hybrid.simulate --workload=lm --vocab=20000 \\
        --workers=8,16,32,64,128,256 --accelerators_per_host=8 \\
        --bandwidth=10gbit --latency=50us --out_dir=sim_out

Profiles the benchmark's `--workload` in this process (the workload flags
are the benchmark's; `--warmup_steps` and `--steps` are the untimed and
timed steps per batch size) and writes `profile.json` to `--out_dir`, or
reads a profile written before with `--profile`. It then predicts bytes
and time per step of hybrid, PS-only, all-reduce and all-gather at each
worker count (`--batch_per_worker` samples per worker), and prints two
tables (throughput and speed-up; communication ms and MB
per worker). With `--out_dir` it also writes `simulation.json` and
`simulation.png`. With `--measured`, it compares its predictions with
benchmark JSON files (`python -m keras_hybrid.benchmark`).

Ports queue without limit unless `--port_buffer_kb` states a buffer per
host port: then an exchange whose flows overrun it waits one TCP timeout
(`--rto`), and the output's `Port buffers:` line says so. `--schedule`
issues the hybrid's all-to-alls concurrently or in rounds.
`--queue_validation=FILE` prints the predicted speed-ups over all-gather
of emulated runs with short and long queues against the measured ones.

With `--resize=3:4` (or a chain, `2:4:3`) it predicts instead the bytes
and seconds of resizing the job's partitioned tables in memory, from the
profile's tables (or `--resize_tables=100000x128,...`) with
`--resize_slots` optimizer slots each (Adam: 2), on the `--bandwidth`
link:

    python -m keras_hybrid.simulate --resize=3:4 \\
        --resize_tables=100000x128 --resize_slots=2 --bandwidth=10gbit
"""

# First: keeps TensorFlow's banners off `--help`.
from keras_hybrid.utils import help_first  # isort: skip

import dataclasses
import json
import os
import sys

from absl import app
from absl import flags
from absl import logging

from keras_hybrid.benchmark import config_flags
from keras_hybrid.costs import cluster_spec
from keras_hybrid.costs import cost_model
from keras_hybrid.costs import design as design_lib
from keras_hybrid.costs import hot_row_savings
from keras_hybrid.costs import port_buffer
from keras_hybrid.costs import resize
from keras_hybrid.costs import traffic
from keras_hybrid.costs.profile import Profile
from keras_hybrid.simulate import cli_flags
from keras_hybrid.simulate import parallax
from keras_hybrid.simulate import queue_validation
from keras_hybrid.simulate import report
from keras_hybrid.simulate import validate

FLAGS = flags.FLAGS
config_flags.define_flags()
flags.adopt_module_key_flags(config_flags)
cli_flags.define_flags()
flags.adopt_module_key_flags(cli_flags)


def _out(text: str) -> None:
    """The command's report goes to stdout (it is what the user asked for);
    progress goes to the absl log."""
    sys.stdout.write(text + "\n")


def _spec(workers: int) -> cluster_spec.ClusterSpec:
    return cluster_spec.ClusterSpec(
        workers=workers,
        accelerators_per_host=min(FLAGS.accelerators_per_host, workers),
        inter_bandwidth=cluster_spec.parse_rate(FLAGS.bandwidth),
        inter_latency=cluster_spec.parse_time(FLAGS.latency),
        intra_bandwidth=cluster_spec.parse_rate(FLAGS.intra_bandwidth),
        intra_latency=cluster_spec.parse_time(FLAGS.intra_latency),
    )


def _worker_counts() -> list[int]:
    try:
        counts = [int(n) for n in FLAGS.workers]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise app.UsageError(
            "`--workers` must be a list of ints >= 1. Received: "
            f"--workers={','.join(FLAGS.workers)}"
        )
    return counts


def _check_modes() -> list[str]:
    bad = [m for m in FLAGS.modes if m not in traffic.MODES]
    if bad or not FLAGS.modes:
        raise app.UsageError(
            f"`--modes` must be a list of {traffic.MODES}. Received: "
            f"--modes={','.join(FLAGS.modes)}"
        )
    return list(FLAGS.modes)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if FLAGS.resize:
        _resize()
        return
    modes = _check_modes()
    try:
        specs = [_spec(n) for n in _worker_counts()]
        buffer = _buffer()
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    profile = _profile()
    if FLAGS.queue_validation:
        _queue_validation(profile)
        return
    batch = FLAGS.batch_per_worker
    if FLAGS.parallax:
        batch = profile.batch_sizes[0]
    design = _design()
    predictions = [
        cost_model.predict(
            profile,
            mode,
            spec,
            batch,
            ps_layout=FLAGS.ps_layout,
            buffer=buffer,
            bucket_bytes=FLAGS.bucket_bytes,
            design=design,
        )
        for spec in specs
        for mode in modes
    ]
    _out(_header(profile, batch, design, buffer, modes))
    _out("Throughput (samples/s) and speed-up of hybrid:")
    _out(report.comparison_table(predictions))
    _out("\nCommunication per step: ms, and MB sent per worker:")
    _out(report.cost_table(predictions))
    if FLAGS.ablation:
        _out(
            "\nAblation (options added one by one; ratios = communication "
            "ms of all-gather or all-reduce over the hybrid's, each under "
            "the same options):"
        )
        _out(report.ablation_table(_ablation(profile, specs, batch, buffer)))
    if FLAGS.shard_load > 1:
        _out(_shard_load(profile, batch))
    checks = _validation(profile, batch)
    if FLAGS.out_dir:
        _write(profile, predictions, checks)


def _buffer() -> port_buffer.PortBuffer | None:
    """The `PortBuffer` of the flags, or `None` for unlimited queues."""
    if not FLAGS.port_buffer_kb:
        return None
    return port_buffer.PortBuffer(
        buffer_bytes=1e3 * FLAGS.port_buffer_kb,
        flight_bytes=1e3 * FLAGS.flow_flight_kb,
        rto=cluster_spec.parse_time(FLAGS.rto),
    )


def _header(profile, batch, design, buffer, modes) -> str:
    """What the predictions are for: workload, cluster, exchange, ports."""
    ports = (
        "unlimited (a deep buffer: no exchange loses a packet or waits "
        "for a timeout)"
        if buffer is None
        else buffer.describe()
        + " (model checked for 1 to 7 flows into a port; a lower bound "
        "beyond)"
    )
    return (
        f"Predicted per step: {profile.name}, {batch} samples per worker, "
        f"{FLAGS.accelerators_per_host} workers per host, host link "
        f"{FLAGS.bandwidth} / {FLAGS.latency}, in-host link "
        f"{FLAGS.intra_bandwidth} / {FLAGS.intra_latency}.\n"
        f"Hybrid exchange: {design.describe()}.\n"
        f"Port buffers: {ports}.\n"
        + (
            f"ps_only layout: {FLAGS.ps_layout} (bytes per host process).\n"
            if FLAGS.ps_layout == "per_host" and "ps_only" in modes
            else ""
        )
    )


def _queue_validation(profile) -> None:
    """Prints predicted against measured speed-ups of emulated runs."""
    try:
        runs = queue_validation.load(FLAGS.queue_validation)
    except (OSError, ValueError) as error:
        raise app.UsageError(str(error)) from error
    rows = queue_validation.compare(profile, runs, FLAGS.batch_per_worker)
    bad = queue_validation.outside(rows)
    _out(
        "Speed-up over allgather of emulated runs (one worker per host, "
        "each link's tbf queue as stated; error = predicted / measured - 1; "
        f"bound {queue_validation.TOLERANCE:.0%}):"
    )
    _out(queue_validation.table(rows))
    _out(f"{len(rows) - len(bad)} of {len(rows)} within the bound.")


def _design() -> design_lib.Design:
    return design_lib.Design(
        padding=FLAGS.padding,
        fused=FLAGS.fused,
        hierarchical=FLAGS.hierarchical,
        hot_rows=FLAGS.hot_rows,
        zipf=FLAGS.zipf,
        schedule=FLAGS.schedule,
    )


def _ablation_designs() -> list:
    """The max_pair unfused exchange, then padding, the fused exchange,
    the hierarchical exchange and hot rows added one by one (the default
    exchange is the one after the fused exchange)."""
    # Padding as built (pairwise sends, each block padded to its own
    # ladder step), unless --padding says otherwise.
    padding = "per_pair" if FLAGS.padding == "max_pair" else FLAGS.padding
    steps = [
        ("max_pair", design_lib.Design("max_pair", False, zipf=FLAGS.zipf)),
        (f"+{padding}", design_lib.Design(padding, False, zipf=FLAGS.zipf)),
    ]
    label = "+fused (default)" if padding == "per_pair" else "+fused"
    steps.append((label, design_lib.Design(padding, True, zipf=FLAGS.zipf)))
    steps.append(
        (
            "+hierarchical",
            design_lib.Design(padding, True, True, zipf=FLAGS.zipf),
        )
    )
    if FLAGS.hot_rows:
        hot = FLAGS.hot_rows
        steps.append(
            (
                f"+hot {hot}",
                design_lib.Design(padding, True, True, hot, FLAGS.zipf),
            )
        )
        # The hierarchical exchange runs only where it pays: the same
        # with the flat exchange.
        steps.append(
            (
                f"flat, hot {hot}",
                design_lib.Design(padding, True, False, hot, FLAGS.zipf),
            )
        )
    return steps


def _ablation(profile, specs, batch, buffer) -> list:
    rows = []
    for spec in specs:
        for label, design in _ablation_designs():
            design = dataclasses.replace(design, schedule=FLAGS.schedule)
            found = {
                mode: cost_model.predict(
                    profile,
                    mode,
                    spec,
                    batch,
                    buffer=buffer,
                    bucket_bytes=FLAGS.bucket_bytes,
                    design=design,
                )
                for mode in ("hybrid", "allgather", "dense")
            }
            rows.append((spec.workers, label, found))
    return rows


def _shard_load(profile, batch) -> str:
    """Busiest shard's rows served over the mean, per table, without and
    with hot rows."""
    n = FLAGS.shard_load
    lines = [
        f"\nRows served per step by the busiest of {n} shards over the mean "
        f"(ids Zipf({FLAGS.zipf}), {batch} samples per worker, 8 draws):",
        f"{'table':>24} {'lookups':>8} {'no hot rows':>12} "
        f"{f'{FLAGS.hot_rows} hot rows':>14} {'rows/shard':>11}",
    ]
    for var in profile.of_kind("sparse"):
        if var.rows < n:
            continue
        lookups = var.lookups(batch)
        base = hot_row_savings.shard_load(var.rows, FLAGS.zipf, lookups, n)
        hot = hot_row_savings.shard_load(
            var.rows, FLAGS.zipf, lookups, n, hot=FLAGS.hot_rows
        )
        lines.append(
            f"{var.path[-24:]:>24} {lookups:>8} "
            f"{base['max_over_mean']:>12.3f} {hot['max_over_mean']:>14.3f} "
            f"{base['mean_rows']:>5.0f}->{hot['mean_rows']:<5.0f}"
        )
    return "\n".join(lines)


def _resize() -> None:
    """Prints the predicted bytes and seconds of `--resize`."""
    try:
        counts = [int(n) for n in FLAGS.resize.split(":")]
        tables = _resize_tables()
        results = resize.resize_traffic(
            tables, counts, engine=FLAGS.resize_engine
        )
        spec_of = _spec
        spec_of(max(counts))  # checks the link flags
    except ValueError as error:
        raise app.UsageError(
            f"{error} (--resize={FLAGS.resize!r}, "
            f"--resize_tables={','.join(FLAGS.resize_tables)!r})"
        ) from error
    described = ", ".join(
        f"{t.rows}x{'x'.join(map(str, t.row_shape))}" for t in tables
    )
    _out(
        f"Predicted resize of tables {described} with {FLAGS.resize_slots} "
        f"slots each ({FLAGS.resize_engine} engine), host link "
        f"{FLAGS.bandwidth} / {FLAGS.latency}, "
        f"{FLAGS.accelerators_per_host} workers per host. Bytes over all "
        "workers; ratio = moved / least any balanced re-partition moves:"
    )
    _out(resize.table(results, spec_of))


def _resize_tables() -> list:
    if FLAGS.resize_tables:
        tables = []
        for text in FLAGS.resize_tables:
            rows, sep, dim = text.partition("x")
            if not sep or not rows.isdigit() or not dim.isdigit():
                raise ValueError(
                    "`--resize_tables` entries must be ROWSxDIM. Received: "
                    f"{text!r}"
                )
            tables.append(
                resize.ResizedTable(
                    int(rows), (int(dim),), 4, FLAGS.resize_slots
                )
            )
        return tables
    return [
        resize.ResizedTable(
            v.shape[0], tuple(v.shape[1:]), v.dtype_bytes, FLAGS.resize_slots
        )
        for v in _profile().variables
        if v.kind == "sparse"
    ]


def _profile() -> Profile:
    if FLAGS.parallax:
        return parallax.PROFILES[FLAGS.parallax]()
    if FLAGS.profile:
        with open(FLAGS.profile) as f:
            return Profile.from_json(f.read())
    from keras_hybrid.simulate import workload_profile

    try:
        config = config_flags.config_from_flags(FLAGS)
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    profile = workload_profile.profile_workload(
        FLAGS.workload, config, FLAGS.warmup_steps, FLAGS.steps
    )
    if FLAGS.out_dir:
        os.makedirs(FLAGS.out_dir, exist_ok=True)
        path = os.path.join(FLAGS.out_dir, "profile.json")
        with open(path, "w") as f:
            f.write(profile.to_json())
        logging.info("Wrote %s", path)
    return profile


def _validation(profile, batch) -> list:
    if not FLAGS.measured:
        return []
    baselines = {}
    for path in FLAGS.baseline:
        body = validate.load_benchmark(path)
        baselines[body["workers"]] = body
    checks = []
    for path in FLAGS.measured:
        measured = validate.load_benchmark(path)
        checks += validate.compare(
            profile,
            measured,
            batch,
            baselines.get(measured["workers"]),
            FLAGS.bucket_bytes,
            design=_design(),
        )
    _out("\nPredicted against measured (error = predicted / measured - 1):")
    _out(validate.table(checks))
    return checks


def _write(profile, predictions, checks) -> None:
    os.makedirs(FLAGS.out_dir, exist_ok=True)
    body = {
        "profile": profile.name,
        "flags": {
            k: FLAGS[k].value
            for k in (
                "workers",
                "accelerators_per_host",
                "bandwidth",
                "latency",
                "intra_bandwidth",
                "intra_latency",
                "batch_per_worker",
                "bucket_bytes",
                "padding",
                "fused",
                "hierarchical",
                "hot_rows",
                "zipf",
                "parallax",
                "ps_layout",
                "schedule",
                "port_buffer_kb",
                "flow_flight_kb",
                "rto",
            )
        },
        "predictions": [p.to_dict() for p in predictions],
        "validation": checks,
    }
    with open(os.path.join(FLAGS.out_dir, "simulation.json"), "w") as f:
        json.dump(body, f, indent=1)
    png = os.path.join(FLAGS.out_dir, "simulation.png")
    report.plot(predictions, png, title=profile.name)
    logging.info("Wrote %s and simulation.json", png)


if __name__ == "__main__":
    help_first.run(main)
