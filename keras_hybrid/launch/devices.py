"""Choice of the accelerator each worker sees."""

import logging
import shutil
import subprocess

logger = logging.getLogger(__name__)

# Values that already hide every GPU; they are passed on unchanged.
_HIDDEN = ("", "-1")


def visible_device(
    local_rank: int, parent_devices: str | None, gpu_count: int
) -> str | None:
    """Returns `CUDA_VISIBLE_DEVICES` for the worker with `local_rank`.

    Args:
        local_rank: Int. Rank of the worker among those on its host.
        parent_devices: String or `None`. The launcher's own
            `CUDA_VISIBLE_DEVICES`, or `None` if it is unset.
        gpu_count: Int. GPUs found by `nvidia-smi`; only used when
            `parent_devices` is `None`.

    Returns:
        The value to set, or `None` to leave the variable unset (no GPUs).

    Example:

    ```python
    visible_device(1, "4,5,6", 0)  # "5"
    visible_device(1, None, 2)     # "1"
    visible_device(1, None, 0)     # None
    ```

    Raises:
        ValueError: If there are GPUs but fewer than `local_rank + 1`.
    """
    if parent_devices is None:
        if gpu_count == 0:
            return None
        devices = [str(index) for index in range(gpu_count)]
        source = f"nvidia-smi lists {gpu_count} GPU(s)"
    else:
        if parent_devices.strip() in _HIDDEN:
            return parent_devices
        devices = [d.strip() for d in parent_devices.split(",") if d.strip()]
        source = f"CUDA_VISIBLE_DEVICES={parent_devices!r}"
    if local_rank >= len(devices):
        raise ValueError(
            "Each local worker needs its own GPU, but "
            f"{source}. Received: local_rank={local_rank}. Start at most "
            f"{len(devices)} worker(s) per host, or set "
            "CUDA_VISIBLE_DEVICES=-1 to run on CPU."
        )
    return devices[local_rank]


def detect_gpu_count() -> int:
    """Counts NVIDIA GPUs with `nvidia-smi --list-gpus`; 0 if unavailable.

    Returns:
        Int. Number of GPUs on this host.
    """
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        output = subprocess.run(
            ["nvidia-smi", "--list-gpus"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("nvidia-smi failed (%s); assuming no GPUs.", error)
        return 0
    return sum(line.startswith("GPU ") for line in output.splitlines())
