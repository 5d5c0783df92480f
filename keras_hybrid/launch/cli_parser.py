"""`keras-hybrid-run`'s flags: one style (dashes; underscores accepted),
no prefix abbreviations, and usage errors that end with the message.

The names follow `horovodrun` (`-np`, `-H`/`--hosts`, `--hostfile`,
`--output-filename`, `--min-np`, `--max-np`, `--host-discovery-script`,
`--verbose`) and `torchrun` (`--log-dir`).
"""

import argparse

from keras_hybrid.launch.console import PROG
from keras_hybrid.launch.preloader import parse_modules
from keras_hybrid.launch.worker_streams import ALL_RANKS

DEFAULT_GRACE_SECONDS = 10.0
USAGE = (
    "%(prog)s [-np N | -H HOSTS | --hostfile FILE | --slurm | "
    "--host-discovery-script SCRIPT] [options] COMMAND ..."
)


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` that never expands a prefix.

    Python 3.11's `allow_abbrev=False` still takes `-n` for `-np` (a
    single-dash option's prefix); this parser matches whole names only.
    """

    def _get_option_tuples(self, option_string):
        return []


def add_flag(group, name: str, *more: str, **kwargs) -> None:
    """Adds `--some-flag` and its other names `more`, plus `--some_flag`
    as a hidden alias of each long name with a dash.

    Args:
        group: An `argparse` parser or argument group.
        name: String. The flag's name with dashes, e.g. `"--min-np"`.
        *more: Strings. More names, e.g. `"-H"` or `"--log-dir"`.
        **kwargs: What `add_argument` takes.
    """
    action = group.add_argument(name, *more, **kwargs)
    hidden = {k: v for k, v in kwargs.items() if k != "dest"}
    hidden.update(
        help=argparse.SUPPRESS, default=argparse.SUPPRESS, dest=action.dest
    )
    for long_name in (name, *more):
        alias = "--" + long_name[2:].replace("-", "_")
        if long_name.startswith("--") and alias != long_name:
            group.add_argument(alias, **hidden)


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-hybrid-run`."""
    parser = Parser(
        prog=PROG,
        usage=USAGE,
        description="Run COMMAND as a multi-worker keras-hybrid job. Each "
        "worker gets TF_CONFIG and KERAS_HYBRID_* variables. The console "
        "shows rank 0's output and every rank's warnings and errors, each "
        "line prefixed with `[rank] `. A COMMAND that is a `.py` file runs "
        "under this launcher's Python.",
        allow_abbrev=False,
    )
    where = parser.add_argument_group("where to run (give one)")
    where.add_argument(
        "-np",
        dest="num_processes",
        type=int,
        metavar="N",
        help="Number of workers: on this machine (127.0.0.1), or with -H "
        "it must equal the slot total. In an elastic job, the number to "
        "start with.",
    )
    add_flag(
        where,
        "--hosts",
        "-H",
        metavar="H1:S1,H2:S2",
        help="Hosts and their slots; ranks fill each host in turn. Remote "
        "hosts are reached with `ssh -o BatchMode=yes`; localhost and "
        "127.0.0.1 run directly.",
    )
    add_flag(
        where,
        "--hostfile",
        metavar="FILE",
        help="File with one host per line, `host slots=N` (as horovodrun "
        "and mpirun read it) or `host:N`; `#` starts a comment.",
    )
    where.add_argument(
        "--slurm",
        action="store_true",
        help="Run as one Slurm task (one launcher per task under srun); the "
        "launcher execs COMMAND.",
    )
    _add_tuning_flags(parser)
    _add_output_flags(parser)
    return parser


def _add_tuning_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--port",
        type=int,
        metavar="PORT",
        help="First port on each host: local rank r listens on PORT + r. "
        "With -np alone the launcher checks that they are free before "
        "starting anything. Default: free ports with -np, 29400 with "
        "-H, --hostfile and --slurm.",
    )
    add_flag(
        parser,
        "--threads",
        type=int,
        help="Intra-op, inter-op and OpenMP threads per worker. Default: "
        "max(1, cpu_count // workers on the host).",
    )
    add_flag(
        parser,
        "--env",
        action="append",
        metavar="KEY=VALUE",
        help="Extra environment variable for every worker; repeatable.",
    )
    add_flag(
        parser,
        "--preload",
        type=_preload,
        metavar="MODULES",
        help="What local Python workers fork from: one process per job "
        "imports these modules once (comma-separated), and each worker "
        "running this launcher's Python on a script or `-m` module is a "
        "fork of it, without importing them again. `auto`: TensorFlow and "
        "Keras, for a script whose source names them; `none`: every worker "
        "starts on its own. Default: $KERAS_HYBRID_PRELOAD, else auto.",
    )
    add_flag(
        parser,
        "--timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="Stop all workers and exit 124 after this long; 0 means no "
        "limit. Not supported with --slurm. Default: %(default)s.",
    )
    add_flag(
        parser,
        "--grace-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        metavar="SECONDS",
        help="Time between SIGTERM and SIGKILL when stopping workers after "
        "a failure, a timeout or SIGTERM (after Ctrl-C: at most 0.5 s). "
        "Default: %(default)s.",
    )


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("output")
    add_flag(
        output,
        "--output-filename",
        "--log-dir",
        dest="log_dir",
        metavar="DIR",
        help="Write each worker's whole output, stdout and stderr, to "
        "DIR/rank.<r>.log (DIR/task.<t>.log in an elastic job).",
    )
    add_flag(
        output,
        "--console-ranks",
        metavar="RANKS",
        help="Ranks whose whole output the console shows, e.g. `0,1`, or "
        f"`{ALL_RANKS}`; the others show their warnings and errors only. "
        "Default: $KERAS_HYBRID_CONSOLE_RANKS, else 0.",
    )
    loudness = output.add_mutually_exclusive_group()
    loudness.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="Every rank's whole output on the console, and the library's "
        "DEBUG lines (KERAS_HYBRID_LOG_LEVEL=debug).",
    )
    loudness.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="Only warnings and errors: the library logs at WARNING "
        "(KERAS_HYBRID_LOG_LEVEL=warning) and the launcher says nothing "
        "unless something fails.",
    )


def _preload(text: str):
    try:
        return parse_modules(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def add_command(parser: argparse.ArgumentParser) -> None:
    """Adds the positional COMMAND, last."""
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND ...",
        help="Program and its arguments, run by every worker (a `.py` "
        "file runs under this launcher's Python).",
    )
