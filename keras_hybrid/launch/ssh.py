"""Building the command that starts a worker on a remote host."""

import os
import re
import shlex
import socket
import subprocess
import sys

from keras_hybrid.launch.validation import LOCAL_HOSTS

# The ssh client, e.g. `ssh -F ./ssh_config -i key`: like GIT_SSH_COMMAND,
# split with shlex. Options given there win over `SSH_OPTIONS` (ssh keeps
# the first value it sees of an option).
SSH_COMMAND_ENV = "KERAS_HYBRID_SSH_COMMAND"
# No password prompts; notice a dead host or link within about 15 s (the
# connection is otherwise silent while a worker computes).
SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",
    "-o",
    "ServerAliveInterval=5",
    "-o",
    "ServerAliveCountMax=3",
)
# ssh's own exit code when it fails (cannot connect, connection lost).
SSH_FAILURE_EXIT_CODE = 255
# Launcher variables that remote workers get too (the rest of the
# launcher's environment stays local): where programs and modules are, and
# the settings of the libraries a worker runs.
FORWARDED_VARIABLES = (
    "PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "PYTHONHASHSEED",
)
FORWARDED_PREFIXES = ("TF_", "KERAS_", "XLA_", "CUDA_", "NCCL_", "OMP_")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_local_host(host: str) -> bool:
    """Returns whether `host` is run directly instead of over ssh.

    Args:
        host: String. Host name from `--hosts`.

    Returns:
        Bool.
    """
    return host in LOCAL_HOSTS


def ssh_client(environ: dict[str, str] | None = None) -> list[str]:
    """Returns the ssh client argv: `$KERAS_HYBRID_SSH_COMMAND` or `ssh`.

    Args:
        environ: Dict or `None`. Environment to read. Defaults to
            `os.environ`.

    Returns:
        List of strings, `SSH_OPTIONS` included.

    Raises:
        ValueError: If the variable is set but empty or unparsable.
    """
    environ = os.environ if environ is None else environ
    value = environ.get(SSH_COMMAND_ENV)
    if value is None:
        return ["ssh", *SSH_OPTIONS]
    try:
        client = shlex.split(value)
    except ValueError as error:
        raise ValueError(
            f"`{SSH_COMMAND_ENV}` must be an ssh command line such as "
            f"'ssh -F ./ssh_config' ({error}). Received: {value!r}."
        ) from None
    if not client:
        raise ValueError(
            f"`{SSH_COMMAND_ENV}` is empty. Unset it to use `ssh`, or give "
            f"a command such as 'ssh -F ./ssh_config'. Received: {value!r}."
        )
    return [*client, *SSH_OPTIONS]


def ssh_hostname(host: str, client: list[str] | None = None) -> str:
    """The name or address ssh connects to for `host` (`ssh -G`: the
    `HostName` of the ssh configuration, e.g.
    `KERAS_HYBRID_SSH_COMMAND='ssh -F config'`), else `host`: what other
    hosts' workers resolve when a cluster names `host`'s tasks.

    Args:
        host: String. A remote host as the discovery script names it.
        client: List of strings or `None`. The ssh client. Defaults to
            `ssh_client()`.
    """
    name = host
    try:
        shown = subprocess.run(
            [*(client or ssh_client()), "-G", host],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        for line in shown.splitlines():
            key, _, value = line.partition(" ")
            if key == "hostname" and value:
                name = value.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return name


def reach_address(host: str, client: list[str] | None = None) -> str:
    """This machine's address on the route to `host`, for a server that
    `host` must reach (the elastic launcher's plans).

    `host` is resolved as ssh resolves it (`ssh_hostname`); the source
    address of a UDP socket connected to it is the answer (nothing is
    sent). Falls back to this machine's fully qualified name.

    Args:
        host: String. A remote host as the discovery script names it.
        client: List of strings or `None`. The ssh client. Defaults to
            `ssh_client()`.

    Returns:
        String. An address or host name.
    """
    name = ssh_hostname(host, client)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((name, 9))
            return sock.getsockname()[0]
    except OSError:
        return socket.getfqdn()


def forwarded_env(environ: dict[str, str]) -> dict[str, str]:
    """The launcher variables that remote workers get too.

    `PATH`, `PYTHONPATH`, `VIRTUAL_ENV`, `LD_LIBRARY_PATH`,
    `PYTHONHASHSEED`, and every variable starting with `TF_`, `KERAS_`,
    `XLA_`, `CUDA_`, `NCCL_` or `OMP_`. `PATH` starts with the directory
    of the launcher's own interpreter, so that `python` on the remote host
    is the same (virtual) environment's interpreter at the same path.

    Args:
        environ: Dict. The launcher's environment.

    Returns:
        Dict of variable name to value.
    """
    out = {
        name: value
        for name, value in environ.items()
        if _NAME.match(name)
        and (name in FORWARDED_VARIABLES or name.startswith(FORWARDED_PREFIXES))
    }
    bin_dir = os.path.dirname(sys.executable)
    path = [p for p in out.get("PATH", "").split(os.pathsep) if p]
    if bin_dir and bin_dir not in path:
        out["PATH"] = os.pathsep.join([bin_dir, *path])
    return out


def ssh_command(
    host: str,
    cwd: str,
    env: dict[str, str],
    command: list[str],
    *,
    grace_seconds: float = 10.0,
    client: list[str] | None = None,
) -> list[str]:
    """Returns the argv that runs `command` on `host` through ssh.

    The remote shell changes to `cwd` (or says that it is missing there),
    sets `env` with `env(1)` and `exec`s the launcher's interpreter on
    `keras_hybrid.launch.remote_guard`, which runs `command`, forwards the
    signal numbers the launcher writes to ssh's stdin and stops the worker
    when that stdin closes. Every piece is quoted with `shlex.quote`.

    Args:
        host: String. Remote host.
        cwd: String. Working directory on the remote host.
        env: Dict. Variables to set for the command.
        command: List of strings. Program and arguments.
        grace_seconds: Float. Time the guard gives the worker between
            SIGTERM and SIGKILL when ssh's stdin closes. Defaults to `10.0`.
        client: List of strings or `None`. The ssh client and its options.
            Defaults to `ssh_client()`.

    Returns:
        List of strings for `subprocess.Popen`.

    Example:

    ```python
    ssh_command("h1", "/job", {"A": "1 2"}, ["python", "t.py"])
    # ["ssh", "-o", "BatchMode=yes", ..., "h1",
    #  "cd /job || ...; exec env 'A=1 2' /venv/bin/python -m "
    #  "keras_hybrid.launch.remote_guard --grace_seconds 10 -- python t.py"]
    ```
    """
    guard = [
        sys.executable,
        "-m",
        "keras_hybrid.launch.remote_guard",
        "--grace_seconds",
        f"{grace_seconds:g}",
        "--",
    ]
    return remote_command(host, cwd, env, guard + list(command), client)


def remote_command(
    host: str,
    cwd: str,
    env: dict[str, str],
    command: list[str],
    client: list[str] | None = None,
) -> list[str]:
    """Returns the argv that runs `command` on `host` through ssh, in
    `cwd` (or says that it is missing there) with `env` set by `env(1)`:
    `ssh_command` without the guard, for a short command whose end the
    launcher waits for (`host_ports`). Every piece is quoted with
    `shlex.quote`.

    Args:
        host: String. Remote host.
        cwd: String. Working directory on the remote host.
        env: Dict. Variables to set for the command.
        command: List of strings. Program and arguments.
        client: List of strings or `None`. The ssh client and its options.
            Defaults to `ssh_client()`.

    Returns:
        List of strings for `subprocess`.
    """
    assignments = " ".join(
        shlex.quote(f"{key}={value}") for key, value in env.items()
    )
    missing = shlex.quote(
        f"keras-hybrid-run: the working directory {cwd} does not exist on "
        f"{host}; every host needs the job's files at the same path."
    )
    remote = (
        f"cd {shlex.quote(cwd)} 2>/dev/null || {{ echo {missing} >&2; "
        f"exit 127; }}; exec env {assignments} {shlex.join(command)}"
    )
    return [*(client or ssh_client()), host, remote]


def failure_hint(host: str, returncode: int | None) -> str:
    """String. Why a remote command's `returncode` may be ssh's own
    (`SSH_FAILURE_EXIT_CODE`), or ``."""
    if returncode != SSH_FAILURE_EXIT_CODE:
        return ""
    return (
        f" (ssh's own failure code: it could not reach host {host}, or "
        f"lost the connection to it)"
    )
