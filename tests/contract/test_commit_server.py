"""`commit_server`: the launcher serves the commit files of partitioned
tables to workers without a shared filesystem (a real server on
localhost; the restore from it is in tests/elastic/test_file_store)."""

import os
import struct
import subprocess
import sys
import time
from multiprocessing.connection import Client

import pytest

from keras_hybrid.contract.blob_stream import send_blob
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_files import folder_name
from keras_hybrid.contract.commit_server import CommitClient
from keras_hybrid.contract.commit_server import CommitServer
from keras_hybrid.contract.commit_server import commit_files_from_env
from keras_hybrid.contract.elastic_board import COMMIT_AUTHKEY_ENV
from keras_hybrid.contract.elastic_board import COMMIT_DIR_ENV
from keras_hybrid.contract.elastic_board import COMMIT_SERVER_ENV

_SERVE = """
import sys, time
from keras_hybrid.contract.commit_server import CommitServer
from keras_hybrid.contract.elastic_board import COMMIT_AUTHKEY_ENV
server = CommitServer(sys.argv[1], "127.0.0.1")
print(server.address, server.env()[COMMIT_AUTHKEY_ENV], flush=True)
time.sleep(600)
"""


def _blob(data):
    """What a store passes to `write`: writes `data` to a file."""
    return lambda f: f.write(data)


def _client_of(server: CommitServer) -> CommitClient:
    key = bytes.fromhex(server.env()[COMMIT_AUTHKEY_ENV])
    return CommitClient(server.address, key)


@pytest.fixture
def server(tmp_path):
    served = CommitServer(str(tmp_path), "127.0.0.1")
    yield served
    served.close()


@pytest.fixture
def client(server, monkeypatch):
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return commit_files_from_env()


def test_blobs_go_to_the_launchers_directory_and_back(server, client):
    folder = folder_name(20, 1)
    assert folder == "commit-20-g1"
    assert not client.exists(folder, 2)
    assert client.read(folder, 2) is None
    client.write(folder, 2, _blob(b"rows of task 2"))
    assert client.exists(folder, 2)
    assert client.read(folder, 2) == b"rows of task 2"
    # On the launcher's host, where `CommitFiles` finds it.
    with open(server.files.path(folder, 2), "rb") as f:
        assert f.read() == b"rows of task 2"
    assert "commit server at 127.0.0.1:" in repr(client)


def test_prune_keeps_the_named_commits_of_one_task(server, client):
    for step in (10, 20, 30):
        for task in (0, 1):
            client.write(folder_name(step, 0), task, _blob(b"x"))
    client.prune(1, [folder_name(20, 0), folder_name(30, 0)])
    root = server.files.root
    folders = [f"commit-{s}-g0" for s in (10, 20, 30)]
    # Task 1's pruned file is its spare (`test_commit_files`).
    assert sorted(os.listdir(root)) == [".spare-task-1.npy", *folders]
    assert os.listdir(os.path.join(root, "commit-10-g0")) == ["task-0.npy"]
    client.prune(0, [folder_name(30, 0)])
    # A folder is gone with the last task's file.
    assert sorted(os.listdir(root)) == [
        ".spare-task-0.npy",
        ".spare-task-1.npy",
        "commit-20-g0",
        "commit-30-g0",
    ]
    assert client.exists(folder_name(20, 0), 1)
    assert not client.exists(folder_name(20, 0), 0)


def test_a_blob_over_64_mb_travels_whole(client):
    blob = bytes(range(256)) * (70 * 4096)  # 70 MiB
    client.write(folder_name(5, 0), 0, _blob(memoryview(blob)))
    assert client.read(folder_name(5, 0), 0) == blob


def test_the_server_refuses_a_peer_without_its_key(server):
    host, _, port = server.address.rpartition(":")
    with pytest.raises(Exception, match="digest"):
        Client((host, int(port)), authkey=b"wrong key")
    wrong = CommitClient(server.address, b"wrong key")
    with pytest.raises(ConnectionError, match="did not answer 'exists'"):
        wrong.exists(folder_name(1, 0), 0)
    # It still serves the right key afterwards.
    assert not _client_of(server).exists(folder_name(1, 0), 0)


def test_a_dead_launcher_is_a_clear_error(tmp_path):
    # The server in a process of its own, killed as a launcher would die.
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address, key = proc.stdout.readline().split()
        client = CommitClient(address, bytes.fromhex(key))
        client.write(folder_name(1, 0), 0, _blob(b"x"))
        assert client.exists(folder_name(1, 0), 0)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with pytest.raises(ConnectionError, match="must be running and reach"):
        client.exists(folder_name(1, 0), 0)
    with pytest.raises(ConnectionError, match="did not answer 'write'"):
        client.write(folder_name(2, 0), 0, _blob(b"x"))


def test_a_failure_on_the_launchers_side_reaches_the_worker(tmp_path):
    (tmp_path / "file").write_text("")
    served = CommitServer(str(tmp_path / "file"), "127.0.0.1")
    try:
        client = _client_of(served)
        with pytest.raises(OSError, match="failed: NotADirectoryError"):
            client.write(folder_name(1, 0), 0, _blob(b"x"))
        with pytest.raises(OSError, match="commit-<step>-g<generation>"):
            client.read("../../etc", 0)
    finally:
        served.close()


def test_a_failed_write_keeps_the_connection_in_step(tmp_path):
    # The server drains the 5 MiB blob it could not write, then answers
    # the next request on the same connection.
    (tmp_path / "file").write_text("")
    served = CommitServer(str(tmp_path / "file"), "127.0.0.1")
    try:
        with _raw_connection(served) as raw:
            raw.send(("write", folder_name(1, 0), 0))
            send_blob(raw, b"r" * (5 << 20))
            ok, error = raw.recv()
            assert not ok and error.startswith("NotADirectoryError")
            raw.send(("exists", folder_name(1, 0), 0))
            assert raw.recv() == (True, False)
    finally:
        served.close()


def _raw_connection(server: CommitServer):
    host, _, port = server.address.rpartition(":")
    key = bytes.fromhex(server.env()[COMMIT_AUTHKEY_ENV])
    return Client((host, int(port)), authkey=key)


def test_an_upload_cut_in_a_chunk_leaves_no_file(server, client):
    # As a worker killed in its upload: the request, a chunk's length,
    # then less than that.
    root = server.files.root
    with _raw_connection(server) as raw:
        raw.send(("write", folder_name(1, 0), 0))
        os.write(raw.fileno(), struct.pack("<Q", 3 << 20) + b"z" * 1000)
        _wait_for(lambda: os.listdir(root))  # the server writes a file
        (temp,) = os.listdir(root)
        assert temp.startswith(".writing-")
    _wait_for(lambda: not os.listdir(root))  # and drops it
    assert not client.exists(folder_name(1, 0), 0)


def _wait_for(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_environment_names_the_store(tmp_path, monkeypatch):
    monkeypatch.delenv(COMMIT_SERVER_ENV, raising=False)
    monkeypatch.delenv(COMMIT_DIR_ENV, raising=False)
    assert commit_files_from_env() is None  # buddy copies
    monkeypatch.setenv(COMMIT_DIR_ENV, str(tmp_path))
    files = commit_files_from_env()
    assert isinstance(files, CommitFiles) and files.root == str(tmp_path)


def test_a_late_write_lands_after_its_folder_was_pruned(server, client):
    # Task 1 is two commits ahead of task 0's background upload of step
    # 10: its prune removed the (then empty) folder; the upload makes it
    # again, and task 0's own next prune removes it.
    for step in (10, 20, 30):
        client.write(folder_name(step, 0), 1, _blob(b"1"))
        client.prune(1, [folder_name(step - 10, 0), folder_name(step, 0)])
    assert not client.exists(folder_name(10, 0), 1)
    client.write(folder_name(10, 0), 0, _blob(b"0"))
    assert client.read(folder_name(10, 0), 0) == b"0"
    client.prune(0, [folder_name(20, 0), folder_name(30, 0)])
    assert sorted(os.listdir(server.files.root)) == [
        ".spare-task-0.npy",
        ".spare-task-1.npy",
        "commit-20-g0",
        "commit-30-g0",
    ]  # and no temporary file is left beside them (spares apart)


def test_a_blob_cut_short_is_dropped(server, client):
    def fail(f):
        f.write(b"x" * (3 << 20))  # three chunks are on their way
        raise MemoryError("no room for the snapshot")

    with pytest.raises(MemoryError, match="no room"):
        client.write(folder_name(1, 0), 0, fail)
    # The next request reconnects; the partial blob never became a file.
    assert not client.exists(folder_name(1, 0), 0)
    deadline = time.monotonic() + 10
    while os.listdir(server.files.root) and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's thread removes its temporary file
    assert os.listdir(server.files.root) == []
