"""The `keras-hybrid-run` command line (also `python -m keras_hybrid.run`).

```
keras-hybrid-run -np 4 python train.py --my-flags
keras-hybrid-run --hosts h1:2,h2:2 python train.py
srun -n 4 keras-hybrid-run --slurm python train.py
```
"""

import argparse
import sys

from keras_hybrid.launch import console
from keras_hybrid.launch import exit_codes
from keras_hybrid.launch import validation
from keras_hybrid.launch.console import PROG
from keras_hybrid.launch.console import logger
from keras_hybrid.launch.elastic import flags as elastic_flags
from keras_hybrid.launch.launcher import DEFAULT_GRACE_SECONDS
from keras_hybrid.launch.launcher import DEFAULT_PORT
from keras_hybrid.launch.launcher import plan_workers
from keras_hybrid.launch.worker_group import WorkerGroup


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-hybrid-run`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run COMMAND as a multi-worker keras-hybrid job. Each "
        "worker gets TF_CONFIG and KERAS_HYBRID_* variables; its output "
        "lines are prefixed with `[rank] `.",
        allow_abbrev=False,
    )
    where = parser.add_argument_group("where to run (give one)")
    where.add_argument(
        "-np",
        dest="num_processes",
        type=int,
        metavar="N",
        help="Number of workers on this machine (127.0.0.1, free ports). "
        "With --hosts it must equal the slot total.",
    )
    where.add_argument(
        "--hosts",
        metavar="H1:S1,H2:S2",
        help="Hosts and their slots; ranks fill each host in turn. Remote "
        "hosts are reached with `ssh -o BatchMode=yes`; localhost and "
        "127.0.0.1 run directly.",
    )
    where.add_argument(
        "--slurm",
        action="store_true",
        help="Run as one Slurm task (one launcher per task under srun); the "
        "launcher execs COMMAND.",
    )
    _add_tuning_flags(parser)
    elastic_flags.add_elastic_flags(parser)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND ...",
        help="Program and its arguments, run by every worker.",
    )
    return parser


def _add_tuning_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="First port on each host for --hosts and --slurm; local rank "
        "r uses port+r. Not used with -np alone. Default: %(default)s.",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="Intra-op, inter-op and OpenMP threads per worker. Default: "
        "max(1, cpu_count // workers on the host).",
    )
    parser.add_argument(
        "--env",
        action="append",
        metavar="KEY=VALUE",
        help="Extra environment variable for every worker; repeatable.",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="Stop all workers and exit 124 after this long; 0 means no "
        "limit. Not supported with --slurm. Default: %(default)s.",
    )
    parser.add_argument(
        "--grace_seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        metavar="SECONDS",
        help="Time between SIGTERM (or the forwarded signal) and SIGKILL "
        "when stopping workers. Default: %(default)s.",
    )


def run() -> None:
    """Parses `sys.argv`, runs the job and exits with its exit code."""
    console.configure()
    parser = build_parser()
    args = parser.parse_args()
    try:
        command = validation.check_command(args.command)
        validation.check_seconds("--timeout", args.timeout)
        validation.check_seconds("--grace_seconds", args.grace_seconds)
        extra_env = validation.parse_env_pairs(args.env)
        if elastic_flags.is_elastic(args):
            sys.exit(elastic_flags.run_elastic(args, command, extra_env))
        if args.slurm:
            _run_slurm(args, command, extra_env)
        commands = plan_workers(
            command,
            args.num_processes,
            hosts=args.hosts,
            port=args.port,
            threads=args.threads,
            env=extra_env,
            grace_seconds=args.grace_seconds,
        )
    except ValueError as error:
        parser.error(str(error))
    group = WorkerGroup(commands, grace_seconds=args.grace_seconds)
    sys.exit(group.run(timeout=args.timeout))


def _run_slurm(
    args: argparse.Namespace, command: list[str], extra_env: dict[str, str]
) -> None:
    # Imported here so that TensorFlow loads only on this path.
    from keras_hybrid.launch import slurm

    if args.num_processes is not None or args.hosts is not None:
        raise ValueError(
            "`--slurm` takes the workers from the Slurm step and cannot be "
            f"combined with -np or --hosts. Received: -np "
            f"{args.num_processes}, --hosts {args.hosts!r}. Use "
            "`srun -n N keras-hybrid-run --slurm ...`."
        )
    if args.timeout:
        raise ValueError(
            "`--timeout` is not supported with --slurm because the launcher "
            f"execs the command. Received: --timeout {args.timeout:g}. Use "
            "`srun --time` instead."
        )
    validation.check_threads(args.threads)
    validation.check_port(args.port, 1)
    env = slurm.slurm_worker_env(
        port=args.port, threads=args.threads, extra_env=extra_env
    )
    try:
        slurm.exec_slurm(command, env)
    except OSError as error:
        logger.error("cannot run %r: %s.", command[0], error)
        sys.exit(exit_codes.NOT_STARTED_EXIT_CODE)


if __name__ == "__main__":
    run()
