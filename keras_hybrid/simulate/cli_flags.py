"""Absl flags of the simulator CLI (`python -m keras_hybrid.simulate`).

The workload's flags, shared with the benchmark, are the benchmark's
`config_flags`.
"""

from absl import flags

from keras_hybrid.costs import cost_model
from keras_hybrid.costs import design as design_lib
from keras_hybrid.costs import resize
from keras_hybrid.costs import traffic
from keras_hybrid.simulate import parallax


def define_flags() -> None:
    """Defines the CLI's own flags: cluster, modes, buffers, resize, output."""
    flags.DEFINE_string(
        "profile",
        None,
        "Profile JSON to simulate; if unset, --workload is profiled.",
    )
    flags.DEFINE_list(
        "workers", ["8", "16", "32", "64", "128", "256"], "Worker counts."
    )
    flags.DEFINE_integer(
        "accelerators_per_host", 8, "Workers per host.", lower_bound=1
    )
    flags.DEFINE_string(
        "bandwidth", "10gbit", "Host interface rate (tc units)."
    )
    flags.DEFINE_string("latency", "50us", "Latency between hosts (tc units).")
    flags.DEFINE_string(
        "intra_bandwidth", "80gbit", "Rate between workers of one host."
    )
    flags.DEFINE_string("intra_latency", "5us", "Latency inside a host.")
    flags.DEFINE_integer(
        "bucket_bytes",
        traffic.DEFAULT_BUCKET_BYTES,
        "Fusion bucket of dense all-reduces (as HybridStrategy's).",
        lower_bound=1,
    )
    flags.DEFINE_list("modes", list(traffic.MODES), "Modes to simulate.")
    flags.DEFINE_enum(
        "ps_layout",
        "per_worker",
        list(cost_model.PS_LAYOUTS),
        "Servers and worker processes of `ps_only`: per_worker (one shard and "
        "one process per accelerator) or per_host (one server and one process "
        "per host, gradients summed in the host: the parameter-server layout "
        "of Parallax's published code).",
    )
    flags.DEFINE_list(
        "measured",
        [],
        "Benchmark JSON files to validate against (same workload and batch).",
    )
    flags.DEFINE_list(
        "baseline",
        [],
        "Benchmark JSON files of the same runs without network emulation (one "
        "per worker count); their step times are the compute time of the "
        "validation.",
    )
    flags.DEFINE_string("out_dir", "", "If set, write JSON and PNG here.")
    flags.DEFINE_enum(
        "padding",
        "per_pair",
        list(design_lib.PADDINGS),
        "How all-to-all blocks are padded. per_pair (default): each block to "
        "its own ladder step; max_pair: every block to the largest pair's "
        "(the padded all-to-all, one AllToAllV2: elastic jobs and the "
        "benchmark's hybrid_padded); exact: no padding (not built).",
    )
    flags.DEFINE_boolean(
        "fused",
        True,
        "The fused exchange: one count, id, pull and push exchange per step "
        "for all tables and lookup calls; --nofused: per table and call "
        "(elastic jobs and the benchmark's hybrid_per_call).",
    )
    flags.DEFINE_boolean(
        "hierarchical",
        False,
        "The hierarchical exchange (HybridStrategy(hierarchical=)): ids "
        "deduped per host, hosts crossed once per host pair and local rank, "
        "pushes summed per host; two-level dense all-reduce (in every mode).",
    )
    flags.DEFINE_enum(
        "schedule",
        "concurrent",
        list(design_lib.SCHEDULES),
        "How a pairwise all-to-all is issued: concurrent (default: to all "
        "peers at once) or rounds (N - 1 rounds, one sender per receiver: "
        "TFCommunicator.exchange_schedule='rounds', the benchmark's "
        "hybrid_rounds). Same bytes; rounds pay a round trip per round and "
        "overrun no port buffer with concurrent flows.",
    )
    flags.DEFINE_float(
        "port_buffer_kb",
        0.0,
        "kB (1000 bytes) a host's network port queues before it drops. With "
        "a buffer, an exchange whose flows overrun it, or queue longer than "
        "--rto, waits one TCP timeout (docs/simulator.md, 'Queueing and "
        "loss'). 0 (default): ports queue without limit and never drop (a "
        "deep buffer).",
        lower_bound=0.0,
    )
    flags.DEFINE_float(
        "flow_flight_kb",
        40.0,
        "kB one flow puts into a port at once when an exchange starts (fitted "
        "to the emulated runs' drops, which allow 28 to 57 kB).",
        lower_bound=0.001,
    )
    flags.DEFINE_string(
        "rto",
        "200ms",
        "TCP retransmission timeout an overrun exchange waits (tc units; "
        "200ms is Linux's minimum).",
    )
    flags.DEFINE_string(
        "queue_validation",
        "",
        "JSON file of emulated runs with short and long link queues "
        "(tests/simulate/data/emulated_queues.json): print the predicted "
        "speed-up over allgather of hybrid and hybrid_rounds against the "
        "measured one (needs the runs' workload profile, --profile).",
    )
    # --hot_rows comes with the workload flags (`benchmark.config_flags`):
    # the benchmark's hybrid_hot mode shares it.
    flags.DEFINE_boolean(
        "ablation",
        False,
        "Print, per worker count, the max_pair unfused exchange, then "
        "--padding (per_pair unless set), the fused exchange and the "
        "hierarchical exchange added one by one, and hot rows if "
        "--hot_rows > 0.",
    )
    flags.DEFINE_integer(
        "shard_load",
        0,
        "If > 1: print, per table, the rows the busiest shard serves per step "
        "over the mean on this many workers, drawn from Zipf(--zipf) ids, "
        "without and with --hot_rows.",
        lower_bound=0,
    )
    flags.DEFINE_enum(
        "parallax",
        "",
        ["", *parallax.PROFILES],
        "Simulate the Parallax paper's LM or NMT, built from model sizes "
        "(keras_hybrid/simulate/parallax.py) instead of a profile.",
    )
    flags.DEFINE_string(
        "resize",
        "",
        "Worker counts of a resize, e.g. 3:4 or 2:4:3: predict the bytes and "
        "seconds of moving the partitioned tables instead of a step.",
    )
    flags.DEFINE_list(
        "resize_tables",
        [],
        "Tables of --resize as ROWSxDIM (float32), e.g. 100000x128; defaults "
        "to the profile's tables.",
    )
    flags.DEFINE_integer(
        "resize_slots",
        2,
        "Optimizer slots moved with each table by --resize (Adam: 2, SGD: 0).",
        lower_bound=0,
    )
    flags.DEFINE_enum(
        "resize_engine",
        "tf",
        list(resize.ENGINES),
        "`tf`: the TF engine's row move, only pairs that move rows talk, each "
        "block padded to its own ladder step; `tf_padded`: one all-to-all "
        "padded to the largest pair (TF engine, exchange='padded'); `exact`: "
        "exact splits (Horovod).",
    )
