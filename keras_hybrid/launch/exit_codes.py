"""Mapping worker return codes to the launcher's exit code."""

import signal

# Exit code when `--timeout` expires, as in coreutils `timeout`.
TIMEOUT_EXIT_CODE = 124
# Exit code when a worker command cannot be started, as in POSIX shells.
NOT_STARTED_EXIT_CODE = 127


def exit_code_for(returncode: int) -> int:
    """Maps a `Popen.returncode` to a shell-style exit code.

    Args:
        returncode: Int. Negative `-k` means the process died by signal `k`.

    Returns:
        Int. `returncode` itself, or `128 + k` for a death by signal `k`.
    """
    return 128 - returncode if returncode < 0 else returncode


def signal_name(signum: int) -> str:
    """Returns e.g. `"SIGKILL"` for 9, or `"signal 99"` if unknown."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_returncode(returncode: int) -> str:
    """Returns e.g. `"code -9 (killed by SIGKILL)"` or `"code 3"`."""
    if returncode < 0:
        return f"code {returncode} (killed by {signal_name(-returncode)})"
    return f"code {returncode}"
