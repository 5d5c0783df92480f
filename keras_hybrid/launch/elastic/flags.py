"""`keras-hybrid-run`'s elastic flags (those of `horovodrun`'s elastic
mode) and the code path they select."""

import argparse
import os

from keras_hybrid.contract.elastic_board import DEFAULT_COMMIT_INTERVAL
from keras_hybrid.launch import validation
from keras_hybrid.launch.cli_parser import add_flag
from keras_hybrid.launch.elastic.commit_store import STORES
from keras_hybrid.launch.elastic.commit_store import check_buddy_copies
from keras_hybrid.launch.elastic.commit_store import choose_store
from keras_hybrid.launch.elastic.driver import ElasticDriver
from keras_hybrid.launch.elastic.driver import check_bounds
from keras_hybrid.launch.elastic.host_discovery import HostDiscovery
from keras_hybrid.launch.worker_defaults import python_command


def add_elastic_flags(parser: argparse.ArgumentParser) -> None:
    """Adds `--min-np`, `--max-np`, `--host-discovery-script`,
    `--discovery-interval`, `--elastic-timeout`, `--commit-interval`,
    `--commit-store`, `--buddy-copies`, `--commit-dir`, `--elastic-dir` and
    `--elastic-address`."""
    group = parser.add_argument_group("elastic training (docs/elastic.md)")
    add_flag(
        group,
        "--host-discovery-script",
        metavar="SCRIPT",
        help="Executable printing `host:slots` lines; polled to grow and "
        "shrink the job between --min-np and --max-np workers.",
    )
    add_flag(
        group, "--min-np", type=int, metavar="N", help="Fewest workers (>= 2)."
    )
    group.add_argument("--max-np", type=int, metavar="N", help="Most workers.")
    add_flag(
        group,
        "--discovery-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="Seconds between runs of the discovery script. Default: "
        "%(default)s.",
    )
    add_flag(
        group,
        "--elastic-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="How long to wait for discovery to report --min-np slots "
        "(at the start, and after lost workers left fewer) before failing. "
        "Default: %(default)s.",
    )
    add_flag(
        group,
        "--commit-interval",
        type=int,
        default=DEFAULT_COMMIT_INTERVAL,
        metavar="STEPS",
        help="Global steps between two in-memory commits of the training "
        "state; after a lost worker the survivors replay the steps since "
        "the last one. Default: %(default)s.",
    )
    add_flag(
        group,
        "--commit-store",
        choices=STORES,
        default=None,
        help="Where commits keep partitioned tables: `directory` writes "
        "each worker's rows to files in --commit-dir; `served` uploads "
        "them to the launcher, which keeps them on its host (no shared "
        "filesystem); `buddy` sends them over TCP to the next worker(s), "
        "which keep them in memory; all in the background, with no "
        "collective at commit time. Default: `directory` on one host or "
        "with --commit-dir, else `served`.",
    )
    add_flag(
        group,
        "--buddy-copies",
        type=int,
        default=1,
        metavar="N",
        help="With --commit-store buddy: how many next workers keep a copy "
        "of each worker's rows. 1 survives one lost worker at a time (or "
        "several that are not neighbours in task order), 2 any two at "
        "once, at twice the traffic. Default: %(default)s.",
    )
    add_flag(
        group,
        "--commit-dir",
        metavar="DIR",
        help="Directory shared by every worker for the directory store; "
        "the job's folder in it is removed at the end. Default: one under "
        "/dev/shm (else under the elastic run directory) on one host; "
        "on several hosts, the served store unless this is given.",
    )
    add_flag(
        group,
        "--elastic-dir",
        metavar="DIR",
        help="Directory every host sees at the same path (e.g. on NFS), "
        "for the plan files of the launcher and the workers; makes the job "
        "multi-host. Default: a local temporary directory on one host; "
        "over TCP from the launcher once discovery names other hosts "
        "(their workers start over ssh).",
    )
    add_flag(
        group,
        "--elastic-address",
        metavar="ADDRESS",
        help="The address or name other hosts reach this host on: its "
        "workers, the launcher's plan board and commit server. Default: "
        "this host's address on the route to the first other host that "
        "discovery names.",
    )


def is_elastic(args: argparse.Namespace) -> bool:
    """Whether any elastic flag was given."""
    return any(
        v is not None
        for v in (args.host_discovery_script, args.min_np, args.max_np)
    )


def run_elastic(args, command: list[str], extra_env: dict, output=None) -> int:
    """Runs the elastic job the flags describe; returns its exit code.

    Raises:
        ValueError: If the flags are incomplete or inconsistent, or the
            discovery script is missing or not executable.
    """
    start_np = args.num_processes
    if not args.host_discovery_script or (
        args.min_np is None and start_np is None
    ):
        raise ValueError(
            "Elastic jobs need --host-discovery-script and -np (the workers "
            "to start with) or --min-np. Received: --host-discovery-script "
            f"{args.host_discovery_script!r}, -np {start_np}, --min-np "
            f"{args.min_np}."
        )
    check_script(args.host_discovery_script)
    if args.hosts or args.slurm:
        raise ValueError(
            "--hosts, --hostfile and --slurm fix the workers; the elastic "
            "flags take them from --host-discovery-script. Give one or the "
            "other."
        )
    min_np = args.min_np if args.min_np is not None else start_np
    max_np = args.max_np
    if max_np is None:
        max_np = max(min_np, start_np or 0)
    check_bounds(min_np, max_np)
    if start_np is not None and not min_np <= start_np <= max_np:
        raise ValueError(
            "In an elastic job -np is the number of workers to start with, "
            "between --min-np and --max-np. Received: -np "
            f"{start_np}, --min-np {min_np}, --max-np {max_np}."
        )
    validation.check_threads(args.threads)
    validation.check_seconds("--discovery-interval", args.discovery_interval)
    validation.check_seconds("--elastic-timeout", args.elastic_timeout)
    if args.commit_interval < 1:
        raise ValueError(
            "--commit-interval must be a positive number of global steps. "
            f"Received: --commit-interval {args.commit_interval}."
        )
    # Before any worker starts; whether the hosts need a shared
    # --commit-dir is checked once discovery named them.
    choose_store(args.commit_store, args.commit_dir, single_host=True)
    check_buddy_copies(args.buddy_copies, args.commit_store)
    if args.elastic_dir is not None and not os.path.isdir(args.elastic_dir):
        raise ValueError(
            "--elastic-dir must be an existing directory that every host "
            f"sees at the same path. Received: {args.elastic_dir!r}."
        )
    driver = ElasticDriver(
        python_command(command),
        min_np,
        max_np,
        HostDiscovery(args.host_discovery_script),
        start_np=start_np,
        output=output,
        threads=args.threads,
        env=extra_env,
        poll_seconds=args.discovery_interval,
        wait_seconds=args.elastic_timeout,
        grace_seconds=args.grace_seconds,
        commit_interval=args.commit_interval,
        commit_store=args.commit_store,
        commit_dir=args.commit_dir,
        elastic_dir=args.elastic_dir,
        address=args.elastic_address,
        buddy_copies=args.buddy_copies,
        preload=args.preload,
    )
    return driver.run(timeout=args.timeout)


def check_script(script: str) -> None:
    """Raises `ValueError` unless `script` is an executable file."""
    if not os.path.isfile(script):
        problem = "does not exist"
    elif not os.access(script, os.X_OK):
        problem = "is not executable (chmod +x)"
    else:
        return
    raise ValueError(
        f"`--host-discovery-script` {problem}. Received: "
        f"--host-discovery-script {script!r}. It must be an executable "
        "that prints `host:slots` lines."
    )
