"""Where an elastic job commits its partitioned tables (`--commit-store`,
`--commit-dir`).

- `directory`: each worker writes its rows to files in a directory every
  worker reads (`elastic.file_store`): on one host the launcher makes
  one under /dev/shm (else under the elastic run directory); on several
  hosts it needs a user-given shared `--commit-dir`.
- `served`: the launcher keeps that directory on its own host and serves
  it over TCP (`commit_server`): no shared filesystem. The default for a
  multi-host job without `--commit-dir`.
- `buddy`: each worker sends its rows to the next ones over TCP, in the
  background (`elastic.buddy_sender`), which keep them in memory; no
  files.

Imports nothing heavy: the launcher runs without TensorFlow.
"""

import os
import shutil
import tempfile

STORES = ("directory", "served", "buddy")
_SHM = "/dev/shm"


def choose_store(
    store: str | None, commit_dir: str | None, single_host: bool
) -> str:
    """The job's store: `store`, or by default `directory` on one host or
    with a `commit_dir`, else `served`.

    Raises:
        ValueError: If `store` is unknown or does not go with
            `commit_dir` and the hosts.
    """
    if store is None:
        return "directory" if single_host or commit_dir else "served"
    if store not in STORES:
        raise ValueError(
            f"--commit-store must be one of {STORES}. Received: {store!r}."
        )
    if store != "directory" and commit_dir:
        where = (
            "keeps its files on the launcher's host"
            if store == "served"
            else "keeps no files"
        )
        raise ValueError(
            f"--commit-dir is for the directory store; the {store} store "
            f"{where}. Received: --commit-dir {commit_dir!r} with "
            f"--commit-store {store}. Drop one of them."
        )
    if store == "directory" and not (single_host or commit_dir):
        raise ValueError(
            "The directory store needs a directory every host shares. "
            "Received: --commit-store directory on several hosts without "
            "--commit-dir. Give a shared --commit-dir, or use "
            "--commit-store served (the default on several hosts)."
        )
    return store


def check_buddy_copies(copies: int, store: str | None) -> None:
    """Raises `ValueError` unless `copies` (`--buddy-copies`) is a
    positive count, and 1 unless the store is `buddy`."""
    if copies < 1:
        raise ValueError(
            "--buddy-copies must be at least 1. Received: --buddy-copies "
            f"{copies}."
        )
    if copies != 1 and store != "buddy":
        given = store or "unset (directory or served)"
        raise ValueError(
            "--buddy-copies is for the buddy store: the directory and "
            "served stores keep every worker's rows in files, which "
            "survive any number of lost workers. Received: --buddy-copies "
            f"{copies} with --commit-store {given}. Add --commit-store "
            "buddy, or drop --buddy-copies."
        )


def make_commit_dir(
    store: str, commit_dir: str | None, run_dir: str
) -> str | None:
    """Creates the job's commit directory; returns it, or None for the
    buddy copy.

    Args:
        store: String. The store `choose_store` returned.
        commit_dir: Optional string. A directory the workers share (the
            directory store); the job's own folder is made in it.
        run_dir: String. The elastic run directory (fallback when this
            host has no /dev/shm).

    Raises:
        ValueError: If `commit_dir` is not a directory.
    """
    if store == "buddy":
        return None
    if commit_dir:
        if not os.path.isdir(commit_dir):
            raise ValueError(
                f"--commit-dir must be an existing directory shared by the "
                f"workers. Received: {commit_dir!r}."
            )
        base = commit_dir
    else:
        base = _SHM if os.path.isdir(_SHM) else run_dir
    return tempfile.mkdtemp(prefix="keras_hybrid_commits_", dir=base)


def remove_commit_dir(path: str | None) -> None:
    """Removes the job's commit directory (at the end of the job)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
