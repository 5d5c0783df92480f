"""Pure checks of launcher input.

Each function raises `ValueError` with a message that names the flag, the
value received and how to fix it; `main.py` turns these into argparse usage
errors (exit code 2) and `launch()` lets them propagate.
"""

LOCAL_HOSTS = ("localhost", "127.0.0.1")


def check_num_processes(num_processes: int) -> int:
    """Checks the `-np` value.

    Args:
        num_processes: Int. Number of worker processes requested.

    Returns:
        The same value.

    Raises:
        ValueError: If `num_processes` is < 1.
    """
    if num_processes < 1:
        raise ValueError(
            "`-np` must be >= 1. "
            f"Received: -np {num_processes}. "
            "Pass the number of worker processes, e.g. `-np 2`."
        )
    return num_processes


def check_threads(threads: int | None) -> int | None:
    """Checks the `--threads` value; `None` means "choose per host".

    Args:
        threads: Int or `None`. Threads per worker process.

    Returns:
        The same value.

    Raises:
        ValueError: If `threads` is not `None` and is < 1.
    """
    if threads is not None and threads < 1:
        raise ValueError(
            "`--threads` must be >= 1. "
            f"Received: --threads {threads}. "
            "Omit the flag to use cpu_count // local workers."
        )
    return threads


def check_seconds(flag: str, seconds: float | None) -> float | None:
    """Checks a duration flag such as `--timeout` or `--grace_seconds`.

    Args:
        flag: String. Flag name used in the error message.
        seconds: Float or `None`. Duration in seconds.

    Returns:
        The same value.

    Raises:
        ValueError: If `seconds` is negative.
    """
    if seconds is not None and seconds < 0:
        raise ValueError(
            f"`{flag}` must be >= 0. Received: {flag} {seconds:g}."
        )
    return seconds


def check_port(port: int, max_local_size: int) -> int:
    """Checks that `port .. port + max_local_size - 1` are valid ports.

    Args:
        port: Int. First port used on each host.
        max_local_size: Int. Largest number of workers on one host.

    Returns:
        The same port.

    Raises:
        ValueError: If a port would fall outside 1..65535.
    """
    last = port + max_local_size - 1
    if port < 1 or last > 65535:
        raise ValueError(
            "`--port` must leave room for one port per local worker in "
            f"1..65535. Received: --port {port} with {max_local_size} "
            "workers on one host. Pick a port such as 29400."
        )
    return port


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """Parses `--hosts "h1:2,h2:2"` into `[("h1", 2), ("h2", 2)]`.

    Args:
        hosts: String. Comma-separated `HOST:SLOTS` entries.

    Returns:
        List of `(host, slots)` pairs in the given order.

    Raises:
        ValueError: If an entry is malformed, a host repeats, slots are < 1,
            or a local host name is mixed with remote hosts.
    """
    entries = [entry.strip() for entry in hosts.split(",")]
    if not hosts.strip():
        raise ValueError(_hosts_error(hosts, "the list is empty"))
    parsed = [_parse_host_entry(hosts, entry) for entry in entries]
    names = [name for name, _ in parsed]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(
            _hosts_error(hosts, f"host {duplicates[0]!r} appears twice")
            + " Give each host once with its total slots."
        )
    local = [name for name in names if name in LOCAL_HOSTS]
    if local and len(local) != len(names):
        raise ValueError(
            _hosts_error(hosts, f"{local[0]!r} is mixed with remote hosts")
            + " Remote workers could not reach it; use this machine's "
            "hostname instead."
        )
    return parsed


def _parse_host_entry(hosts: str, entry: str) -> tuple[str, int]:
    name, sep, slots = entry.rpartition(":")
    if not sep or not name or not slots:
        raise ValueError(_hosts_error(hosts, f"entry {entry!r} is malformed"))
    try:
        count = int(slots)
    except ValueError:
        raise ValueError(
            _hosts_error(hosts, f"slots in {entry!r} are not an integer")
        ) from None
    if count < 1:
        raise ValueError(_hosts_error(hosts, f"slots in {entry!r} are < 1"))
    return name, count


def _hosts_error(hosts: str, problem: str) -> str:
    return (
        f"`--hosts` must look like `h1:2,h2:2` (HOST:SLOTS, slots >= 1), "
        f"but {problem}. Received: --hosts {hosts!r}."
    )


def resolve_num_processes(
    num_processes: int | None, hosts: list[tuple[str, int]] | None
) -> int:
    """Reconciles `-np` with the slot total of `--hosts`.

    Args:
        num_processes: Int or `None`. Value of `-np`.
        hosts: List of `(host, slots)` or `None`. Parsed `--hosts`.

    Returns:
        The world size.

    Raises:
        ValueError: If neither is given, or both are given and disagree.
    """
    if hosts is None:
        if num_processes is None:
            raise ValueError(
                "One of `-np`, `--hosts` or `--slurm` is required. "
                "Received none of them. Example: `-np 2 python train.py`."
            )
        return check_num_processes(num_processes)
    total = sum(slots for _, slots in hosts)
    if num_processes is not None and num_processes != total:
        raise ValueError(
            "`-np` must equal the number of slots in `--hosts`. "
            f"Received: -np {num_processes} with {total} slots. "
            "Drop `-np` or make the two agree."
        )
    return total


def parse_env_pairs(pairs: list[str] | None) -> dict[str, str]:
    """Parses repeated `--env KEY=VALUE` flags.

    Args:
        pairs: List of strings or `None`.

    Returns:
        Dict of the extra variables, later flags winning.

    Raises:
        ValueError: If an entry has no `=` or an empty key.
    """
    result = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                "`--env` must look like KEY=VALUE. "
                f"Received: --env {pair!r}. Example: `--env NCCL_DEBUG=INFO`."
            )
        result[key] = value
    return result


def check_command(command: list[str]) -> list[str]:
    """Checks the worker command and drops a leading `--` separator.

    Args:
        command: List of strings. Program and its arguments.

    Returns:
        The command without a leading `--`.

    Raises:
        ValueError: If the command is empty.
    """
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError(
            "A command to run is required. Received: no command. "
            "Example: `keras-hybrid-run -np 2 python train.py`."
        )
    return list(command)
