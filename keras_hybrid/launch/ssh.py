"""Building the command that starts a worker on a remote host."""

import shlex

from keras_hybrid.launch.validation import LOCAL_HOSTS

SSH_OPTIONS = ("-o", "BatchMode=yes")


def is_local_host(host: str) -> bool:
    """Returns whether `host` is run directly instead of over ssh.

    Args:
        host: String. Host name from `--hosts`.

    Returns:
        Bool.
    """
    return host in LOCAL_HOSTS


def ssh_command(
    host: str, cwd: str, env: dict[str, str], command: list[str]
) -> list[str]:
    """Returns the argv that runs `command` on `host` through ssh.

    The remote shell changes to `cwd`, sets `env` with `env(1)` and `exec`s
    the command, so every piece is quoted with `shlex.quote`.

    Args:
        host: String. Remote host.
        cwd: String. Working directory on the remote host.
        env: Dict. Variables to set for the command.
        command: List of strings. Program and arguments.

    Returns:
        List of strings for `subprocess.Popen`.

    Example:

    ```python
    ssh_command("h1", "/job", {"A": "1 2"}, ["python", "t.py"])
    # ["ssh", "-o", "BatchMode=yes", "h1",
    #  "cd /job && exec env 'A=1 2' python t.py"]
    ```
    """
    assignments = " ".join(
        shlex.quote(f"{key}={value}") for key, value in env.items()
    )
    remote = (
        f"cd {shlex.quote(cwd)} && exec env {assignments} {shlex.join(command)}"
    )
    return ["ssh", *SSH_OPTIONS, host, remote]
