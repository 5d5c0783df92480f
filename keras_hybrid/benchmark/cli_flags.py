"""Absl flags of the benchmark CLI (`python -m keras_hybrid.benchmark`).

The workload's flags, which the workers get too, are in `config_flags`.
"""

from absl import flags

from keras_hybrid.benchmark import modes


def define_flags() -> None:
    """Defines the CLI's own flags: workers, modes, network, output."""
    flags.DEFINE_integer(
        "workers", 4, "Worker processes per mode.", lower_bound=1
    )
    flags.DEFINE_list(
        "modes",
        ["hybrid", "allgather", "dense"],
        f"Modes to compare, in order; among {modes.names()}.",
    )
    flags.DEFINE_string(
        "netem",
        "",
        "BANDWIDTH:LATENCY (e.g. 10gbit:50us): run every worker in its own "
        "network namespace with this link. Needs root. Empty: loopback.",
    )
    flags.DEFINE_float(
        "target_step_ms",
        0.0,
        "Network-scaled run: compute time of one step on the target cluster's "
        "accelerators, in ms. The link rate here becomes --target_bandwidth x "
        "target_step_ms / (step time measured here with unlimited links), so "
        "that communication's share of a step matches the target. 0: off.",
        lower_bound=0.0,
    )
    flags.DEFINE_string(
        "target_bandwidth",
        "10gbit",
        "Network-scaled run: the target cluster's link rate per worker (or "
        "per host with --emulated_hosts), in bit/kbit/mbit/gbit.",
    )
    flags.DEFINE_string(
        "calibration_mode",
        "hybrid",
        "Network-scaled run: the mode whose step time with unlimited links "
        "stands for this machine's compute time per step.",
    )
    flags.DEFINE_integer(
        "emulated_hosts",
        0,
        "If > 0, run the workers on this many network namespaces acting as "
        "hosts (--workers must be a multiple), each with its own sshd, "
        "launched by `keras-hybrid-run --hosts` over ssh. Needs root and "
        "openssh-server. Link limits then apply per host. 0: one namespace "
        "per worker with --netem, else loopback.",
        lower_bound=0,
    )
    flags.DEFINE_float(
        "tbf_queue_ms",
        50.0,
        "On rate-limited links (--netem or --target_step_ms, with or without "
        "--emulated_hosts) of a kernel without sch_netem (tbf links): the "
        "longest a packet may wait in a link's token bucket before tbf drops "
        "it (tbf `latency`). Each link then queues rate x this + the bucket "
        "(64 kB up to 128 Mbit/s) bytes, the JSON's `tbf_limit_bytes`: the "
        "buffer regime a figure stands for. The default 50 is a shallow "
        "buffer (105 to 324 kB at the 6.5 to 67 Mbit/s of the network-scaled "
        "lm runs): 8 workers' concurrent all-to-alls overrun it and wait for "
        "TCP timeouts; 10 is shallower (4 workers' too); 400 is a deep "
        "buffer where no run dropped a packet (docs/benchmarks.md, 'Buffer "
        "regimes').",
        lower_bound=0.001,
    )
    flags.DEFINE_string("output_json", "", "Write the results here.")
    flags.DEFINE_string("plot", "", "Write a PNG of the results here.")
    flags.DEFINE_integer(
        "threads", 1, "Intra- and inter-op threads per worker.", lower_bound=1
    )
    flags.DEFINE_float(
        "timeout", 900.0, "Seconds allowed per mode.", lower_bound=1.0
    )
    flags.DEFINE_integer(
        "repeats",
        1,
        "Run the list of modes this many times in turn and report, per mode, "
        "the median over repeats (a shared machine's load drifts).",
        lower_bound=1,
    )
    flags.DEFINE_integer(
        "callback_overhead_repeats",
        0,
        "If > 0, the first mode also fits the measured steps this many times "
        "with and without CommunicationStats, alternating, and reports the "
        "ratio of fit times.",
        lower_bound=0,
    )
