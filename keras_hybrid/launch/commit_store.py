"""Where an elastic job commits its partitioned tables (`--commit-dir`,
`--commit-store`).

The directory store (`strategy.elastic_store`) needs a directory every
worker can read: on one host the launcher makes one under /dev/shm (else
under the elastic run directory); a multi-host job needs a user-given
shared `--commit-dir`, or keeps the buddy copy (`strategy.elastic_buddy`).
"""

import os
import shutil
import tempfile

STORES = ("directory", "buddy")
_SHM = "/dev/shm"


def make_commit_dir(
    store: str, commit_dir: str | None, run_dir: str, single_host: bool
) -> str | None:
    """Creates the job's commit directory; returns it, or None for the
    buddy copy.

    Args:
        store: String. `"directory"` or `"buddy"`.
        commit_dir: Optional string. A directory the workers share; the
            job's own folder is made in it.
        run_dir: String. The elastic run directory (fallback on one host).
        single_host: Boolean. Whether every worker runs on this host.

    Raises:
        ValueError: If `store` is unknown, or `commit_dir` is given with
            the buddy store or is not a directory.
    """
    if store not in STORES:
        raise ValueError(
            f"--commit-store must be one of {STORES}. Received: {store!r}."
        )
    if store == "buddy":
        if commit_dir:
            raise ValueError(
                "--commit-dir is for the directory store; the buddy store "
                f"keeps no files. Received: --commit-dir {commit_dir!r} "
                "with --commit-store buddy. Drop one of them."
            )
        return None
    if commit_dir:
        if not os.path.isdir(commit_dir):
            raise ValueError(
                f"--commit-dir must be an existing directory shared by the "
                f"workers. Received: {commit_dir!r}."
            )
        base = commit_dir
    elif single_host:
        base = _SHM if os.path.isdir(_SHM) else run_dir
    else:
        return None
    return tempfile.mkdtemp(prefix="keras_hybrid_commits_", dir=base)


def remove_commit_dir(path: str | None) -> None:
    """Removes the job's commit directory (at the end of the job)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
