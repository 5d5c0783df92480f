"""The elastic launcher's plan board: files, or its TCP server."""

from multiprocessing.connection import Client

import pytest

from keras_hybrid.contract import elastic_board as em
from keras_hybrid.contract.plan_channel import AUTHKEY_ENV
from keras_hybrid.contract.plan_channel import CHANNEL_ENV
from keras_hybrid.contract.plan_channel import ChannelServer
from keras_hybrid.contract.plan_channel import FileChannel
from keras_hybrid.contract.plan_channel import TeeChannel
from keras_hybrid.contract.plan_channel import channel_from_env
from keras_hybrid.launch.ssh import reach_address


def test_a_worker_reads_and_writes_the_launchers_board(monkeypatch):
    server = ChannelServer("127.0.0.1")
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        worker = channel_from_env()
        em.write_plan(server, 1, [0, 2, 1], "discovery", [2])
        assert worker.get("plan-2.json") is None
        assert '"members": [0, 1, 2]' in worker.get("plan-1.json")
        worker.put("ready-2", "")
        assert server.get("ready-2") == ""
        assert worker.names() == ["plan-1.json", "ready-2"]
    finally:
        server.close()


def test_the_server_refuses_a_peer_without_its_key():
    server = ChannelServer("127.0.0.1")
    try:
        host, _, port = server.address.rpartition(":")
        with pytest.raises(Exception, match="digest"):
            Client((host, int(port)), authkey=b"wrong key")
        # It still serves the right key afterwards.
        assert server.env()[CHANNEL_ENV] == server.address
        key = bytes.fromhex(server.env()[AUTHKEY_ENV])
        server.put("plan-1.json", "{}")
        with Client((host, int(port)), authkey=key) as conn:
            conn.send(("get", "plan-1.json"))
            assert conn.recv() == "{}"
    finally:
        server.close()


def test_files_without_a_server(tmp_path, monkeypatch):
    monkeypatch.delenv(CHANNEL_ENV, raising=False)
    channel = channel_from_env(str(tmp_path))
    assert isinstance(channel, FileChannel)
    em.write_recovery(channel, 3, [0, 1], ["a:1", "b:2"], [2], leader=0)
    assert (tmp_path / "recover-3.json").exists()
    assert channel.get("recover-4.json") is None
    assert channel.env() == {}


def test_reach_address_resolves_as_ssh_does(tmp_path):
    client = tmp_path / "ssh"
    client.write_text("#!/bin/sh\necho 'hostname 127.0.0.1'\n")
    client.chmod(0o755)
    assert reach_address("alias", [str(client)]) == "127.0.0.1"


@pytest.mark.parametrize("kind", ["files", "server"])
def test_the_launcher_removes_a_stale_ready_mark(kind, tmp_path):
    # A replacement joiner must not be admitted on its predecessor's mark.
    board = FileChannel(str(tmp_path)) if kind == "files" else None
    board = board or ChannelServer("127.0.0.1")
    try:
        board.put("ready-2", "")
        board.remove("ready-2")
        board.remove("ready-3")  # absent: nothing to do
        assert board.get("ready-2") is None
        assert board.names() == []
    finally:
        if kind == "server":
            board.close()


def test_a_tee_writes_both_boards_and_reads_either(tmp_path):
    """A job that widened: members read the files, workers started since
    read the server; what either wrote reaches the launcher."""
    files = FileChannel(str(tmp_path))
    tee = TeeChannel(files, ChannelServer("127.0.0.1"))
    try:
        em.write_plan(tee, 1, [0, 1, 2], "readdress", cluster=["a:1"])
        assert files.get("plan-1.json") == tee.server.get("plan-1.json")
        files.put("recovered-1.json", "{}")  # a member
        tee.server.put("ready-2", "")  # a worker on another host
        assert tee.get("recovered-1.json") == "{}"
        assert tee.get("ready-2") == ""
        assert tee.names() == ["plan-1.json", "ready-2", "recovered-1.json"]
        tee.remove("ready-2")
        assert tee.get("ready-2") is None
        assert tee.env() == tee.server.env()
    finally:
        tee.close()
