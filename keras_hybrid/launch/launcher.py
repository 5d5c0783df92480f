"""Python entry point: plan the workers of a job and run them."""

import os

from keras_hybrid.contract.worker_env import worker_env
from keras_hybrid.contract.worker_spec import WorkerSpec
from keras_hybrid.launch import devices
from keras_hybrid.launch import validation
from keras_hybrid.launch.ssh import forwarded_env
from keras_hybrid.launch.ssh import is_local_host
from keras_hybrid.launch.ssh import ssh_client
from keras_hybrid.launch.ssh import ssh_command
from keras_hybrid.launch.topology import check_ports_free
from keras_hybrid.launch.topology import free_ports
from keras_hybrid.launch.topology import host_specs
from keras_hybrid.launch.topology import local_specs
from keras_hybrid.launch.worker_command import WorkerCommand
from keras_hybrid.launch.worker_defaults import interpreter_path
from keras_hybrid.launch.worker_defaults import python_command
from keras_hybrid.launch.worker_group import WorkerGroup
from keras_hybrid.launch.worker_streams import OutputSettings

DEFAULT_PORT = 29400
DEFAULT_GRACE_SECONDS = 10.0


def plan_workers(
    command: list[str],
    num_processes: int | None = None,
    *,
    hosts: str | None = None,
    port: int | None = None,
    threads: int | None = None,
    env: dict[str, str] | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
) -> list[WorkerCommand]:
    """Validates the job and returns one `WorkerCommand` per rank.

    Nothing is started. Without `hosts`, workers listen on `127.0.0.1` on
    free ports, or on `port + rank` if `port` is given; with `hosts`, on
    `port + local_rank` of each host, and workers on hosts other than
    `localhost`/`127.0.0.1` start through ssh. Ports on this machine are
    checked to be free. Local workers find the launcher's Python first on
    `PATH`, and a command that is a `.py` file runs under it.

    Args:
        command: List of strings. Program and arguments for every worker.
        num_processes: Int or `None`. Number of workers (`-np`).
        hosts: String or `None`. `"h1:2,h2:2"`, hosts with their slots.
        port: Int or `None`. First port per host. Defaults to free ports
            without `hosts`, `29400` with them.
        threads: Int or `None`. Threads per worker. Defaults to
            `max(1, os.cpu_count() // local_size)`.
        env: Dict or `None`. Extra variables for every worker.
        grace_seconds: Float. Time a remote worker gets between SIGTERM
            and SIGKILL when its ssh connection closes. Defaults to `10.0`.

    Returns:
        List of `WorkerCommand` in rank order.

    Raises:
        ValueError: For any invalid argument; see `validation`.
    """
    command = python_command(validation.check_command(command))
    validation.check_threads(threads)
    host_list = None if hosts is None else validation.parse_hosts(hosts)
    size = validation.resolve_num_processes(num_processes, host_list)
    if host_list is None and port is None:
        specs = local_specs(free_ports(size))
    elif host_list is None:
        validation.check_port(port, size)
        specs = local_specs([port + rank for rank in range(size)])
    else:
        port = DEFAULT_PORT if port is None else port
        validation.check_port(port, max(slots for _, slots in host_list))
        specs = host_specs(host_list, port)
    if port is not None:
        local = [s for s in specs if is_local_host(s.host)]
        check_ports_free([s.port for s in local], [s.host for s in local])
    cluster = [spec.address for spec in specs]
    parent_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpu_count = devices.detect_gpu_count() if parent_devices is None else 0
    client = None if host_list is None else ssh_client()
    commands = []
    for spec in specs:
        device = devices.visible_device(
            spec.local_rank, parent_devices, gpu_count
        )
        contract = worker_env(
            spec, cluster, threads=threads, device=device, extra_env=env
        )
        commands.append(
            _worker_command(spec, command, contract, client, grace_seconds)
        )
    return commands


def _worker_command(
    spec: WorkerSpec,
    command: list[str],
    contract: dict[str, str],
    client: list[str] | None,
    grace_seconds: float,
) -> WorkerCommand:
    if is_local_host(spec.host):
        env = {**os.environ, "PATH": interpreter_path(os.environ)}
        return WorkerCommand(spec.rank, command, {**env, **contract})
    # ssh itself keeps the launcher's environment (agent socket etc.); the
    # worker gets the forwarded variables and the contract on the remote
    # side.
    remote_env = {**forwarded_env(os.environ), **contract}
    argv = ssh_command(
        spec.host,
        os.getcwd(),
        remote_env,
        command,
        grace_seconds=grace_seconds,
        client=client,
    )
    return WorkerCommand(spec.rank, argv, dict(os.environ), host=spec.host)


def launch(
    command: list[str],
    num_processes: int | None = None,
    *,
    hosts: str | None = None,
    port: int | None = None,
    threads: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    output: OutputSettings | None = None,
    preload=None,
) -> int:
    """Runs `command` as a multi-worker job and returns its exit code.

    Worker output goes to `sys.stdout`/`sys.stderr`, each line prefixed
    with `[rank] `. If a worker fails, the others are stopped. SIGINT and
    SIGTERM are forwarded to the workers when called from the main thread.

    Args:
        command: List of strings. Program and arguments for every worker.
        num_processes: Int or `None`. Number of workers.
        hosts: String or `None`. `"h1:2,h2:2"`, hosts with their slots.
        port: Int or `None`. First port per host. Defaults to free ports
            without `hosts`, `29400` with them.
        threads: Int or `None`. Threads per worker. Defaults to
            `max(1, os.cpu_count() // local_size)`.
        env: Dict or `None`. Extra variables for every worker.
        timeout: Float or `None`. Seconds for the whole job; `None` or `0`
            for no limit.
        grace_seconds: Float. Seconds between SIGTERM and SIGKILL when
            stopping workers. Defaults to `10.0`.
        output: `OutputSettings` or `None`. Which ranks the console shows
            whole and where per-rank log files go. Defaults to every
            rank's whole output.
        preload: What local Python workers fork from: `"auto"`, a tuple
            of module names, `()` for nothing, or `None` for
            `$KERAS_HYBRID_PRELOAD` (default `auto`); see
            `keras_hybrid.launch.preloader`.

    Returns:
        Int. `0` on success, else the first failed worker's exit code
        (`128 + k` for death by signal `k`), `124` on timeout, `128 + k` if
        the launcher received signal `k`, `127` if a worker could not start.

    Example:

    ```python
    from keras_hybrid.launch import launch
    code = launch(["python", "train.py"], 2, timeout=600)
    ```

    Raises:
        ValueError: For any invalid argument.
    """
    validation.check_seconds("--timeout", timeout)
    validation.check_seconds("--grace_seconds", grace_seconds)
    commands = plan_workers(
        command,
        num_processes,
        hosts=hosts,
        port=port,
        threads=threads,
        env=env,
        grace_seconds=grace_seconds,
    )
    group = WorkerGroup(
        commands, grace_seconds=grace_seconds, output=output, preload=preload
    )
    return group.run(timeout=timeout)
