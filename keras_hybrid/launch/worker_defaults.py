"""What the launcher adds to every worker beyond the contract: the
launcher's Python first on `PATH`, a `.py` command run by that Python,
and quiet defaults for TensorFlow's and the library's logs."""

import os
import sys

from keras_hybrid.contract.console import CONSOLE_TERMINAL_ENV
from keras_hybrid.contract.console import LOG_LEVEL_ENV
from keras_hybrid.contract.console import QUIET_TF_LOG_LEVEL
from keras_hybrid.contract.console import TF_LOG_LEVEL_ENV


def python_command(command: list[str]) -> list[str]:
    """`command`, with the launcher's interpreter in front of a `.py`
    script (`keras-hybrid-run -np 2 train.py`, as with `torchrun`).

    Example:

    ```python
    python_command(["train.py", "--steps=5"])
    # ["/venv/bin/python", "train.py", "--steps=5"]
    ```
    """
    if command and command[0].endswith(".py"):
        return [sys.executable, *command]
    return list(command)


def interpreter_path(environ: dict[str, str]) -> str:
    """`PATH` with the launcher's interpreter's directory first, so that
    `python` in a worker command is the launcher's (virtual)
    environment's, activated or not."""
    bin_dir = os.path.dirname(sys.executable)
    path = [p for p in environ.get("PATH", "").split(os.pathsep) if p]
    if bin_dir and path[:1] != [bin_dir]:
        path = [bin_dir, *(p for p in path if p != bin_dir)]
    return os.pathsep.join(path)


def console_env(
    environ: dict[str, str], *, log_level: str | None, terminal: bool
) -> dict[str, str]:
    """The variables that keep a worker's output readable.

    Args:
        environ: Dict. The launcher's environment; a variable the user set
            there is left alone.
        log_level: Optional string. The library's log level for
            `--verbose`/`--quiet`; `None` keeps the user's (or `info`).
        terminal: Bool. Whether the launcher's console is a terminal.

    Returns:
        Dict of variable name to value.
    """
    env = {}
    if TF_LOG_LEVEL_ENV not in environ:
        env[TF_LOG_LEVEL_ENV] = QUIET_TF_LOG_LEVEL
    if log_level is not None:
        env[LOG_LEVEL_ENV] = log_level
    if CONSOLE_TERMINAL_ENV not in environ:
        env[CONSOLE_TERMINAL_ENV] = "1" if terminal else "0"
    return env
