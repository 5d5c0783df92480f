"""The `keras-hybrid-run` command line (also `python -m keras_hybrid.run`).

```
keras-hybrid-run -np 4 python train.py --my-flags
keras-hybrid-run --hosts h1:2,h2:2 python train.py
srun -n 4 keras-hybrid-run --slurm python train.py
```
"""

import argparse
import os
import sys

from keras_hybrid.launch import cli_parser
from keras_hybrid.launch import console
from keras_hybrid.launch import exit_codes
from keras_hybrid.launch import validation
from keras_hybrid.launch import worker_defaults
from keras_hybrid.launch import worker_streams
from keras_hybrid.launch.console import logger
from keras_hybrid.launch.elastic import flags as elastic_flags
from keras_hybrid.launch.hostfile import read_hostfile
from keras_hybrid.launch.launcher import DEFAULT_PORT
from keras_hybrid.launch.launcher import plan_workers
from keras_hybrid.launch.worker_group import WorkerGroup


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-hybrid-run`."""
    parser = cli_parser.build_parser()
    elastic_flags.add_elastic_flags(parser)
    cli_parser.add_command(parser)
    return parser


def run() -> None:
    """Parses `sys.argv`, runs the job and exits with its exit code."""
    parser = build_parser()
    args = parser.parse_args()
    console.configure(quiet=args.quiet)
    try:
        command = validation.check_command(args.command)
        validation.check_seconds("--timeout", args.timeout)
        validation.check_seconds("--grace-seconds", args.grace_seconds)
        output = _output_settings(args)
        extra_env = {
            **worker_defaults.console_env(
                os.environ,
                log_level=_log_level(args),
                terminal=_is_terminal(sys.stdout),
            ),
            **validation.parse_env_pairs(args.env),
        }
        if args.hostfile is not None:
            if args.hosts is not None:
                raise ValueError(
                    "Give the hosts once: `-H`/`--hosts` or `--hostfile`. "
                    f"Received: --hosts {args.hosts!r} and --hostfile "
                    f"{args.hostfile!r}."
                )
            args.hosts = read_hostfile(args.hostfile)
        if elastic_flags.is_elastic(args):
            sys.exit(
                elastic_flags.run_elastic(args, command, extra_env, output)
            )
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
    group = WorkerGroup(
        commands,
        grace_seconds=args.grace_seconds,
        output=output,
        preload=args.preload,
    )
    sys.exit(group.run(timeout=args.timeout))


def _output_settings(args) -> worker_streams.OutputSettings:
    ranks = args.console_ranks or os.environ.get(
        worker_streams.CONSOLE_RANKS_ENV, "0"
    )
    if args.verbose:
        ranks = worker_streams.ALL_RANKS
    return worker_streams.OutputSettings(
        console_ranks=worker_streams.parse_console_ranks(ranks),
        log_dir=args.log_dir,
        quiet_tf_banners=worker_defaults.TF_LOG_LEVEL_ENV not in os.environ,
    )


def _log_level(args) -> str | None:
    if args.verbose:
        return "debug"
    if args.quiet:
        return "warning"
    return None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


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
    port = DEFAULT_PORT if args.port is None else args.port
    validation.check_port(port, 1)
    env = slurm.slurm_worker_env(
        port=port, threads=args.threads, extra_env=extra_env
    )
    try:
        slurm.exec_slurm(command, env)
    except OSError as error:
        logger.error("cannot run %r: %s.", command[0], error)
        sys.exit(exit_codes.NOT_STARTED_EXIT_CODE)


if __name__ == "__main__":
    run()
