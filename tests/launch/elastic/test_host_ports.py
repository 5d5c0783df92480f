"""Free ports asked of the host where tasks run: the query module run
through an ssh client, and its failures named with the host."""

import socket

import pytest

from keras_hybrid.launch.elastic import host_ports
from keras_hybrid.launch.elastic.host_ports import HostPortsError
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV

# An ssh client stand-in: skips `-o OPTION` pairs, then runs the remote
# command here, as if every host were this one.
_FAKE_SSH = """#!/bin/sh
while [ "$1" = "-o" ]; do shift 2; done
exec sh -c "$2"
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    path = tmp_path / "fake_ssh"
    path.write_text(_FAKE_SSH)
    path.chmod(0o755)
    monkeypatch.setenv(SSH_COMMAND_ENV, str(path))
    return path


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host_ports.ANY_ADDRESS, port))
        except OSError:
            return False
    return True


def test_the_query_prints_distinct_ports_free_on_every_address(capsys):
    assert host_ports.main(["3"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(host_ports.MARKER)
    ports = [int(p) for p in line[len(host_ports.MARKER) :].split()]
    assert len(set(ports)) == 3
    assert all(_bindable(p) for p in ports)


def test_a_host_is_asked_over_ssh_and_skips_login_noise(fake_ssh, tmp_path):
    # A login script that talks on stdout does not confuse the answer.
    profile = tmp_path / "noisy"
    profile.write_text("#!/bin/sh\necho 'Welcome 1 2 3'\nexec \"$@\"\n")
    profile.chmod(0o755)
    client = [str(fake_ssh)]
    ports = host_ports.query_ports("hostB", 4, client)
    assert len(set(ports)) == 4 and all(_bindable(p) for p in ports)
    noisy = [
        "sh",
        "-c",
        f'exec {profile} sh -c "$2"',
        "ssh",
    ]
    assert len(host_ports.query_ports("hostB", 2, noisy)) == 2


def test_ports_come_per_host_and_tasks_of_a_host_never_share(fake_ssh):
    placed = {0: "localhost", 1: "hostB", 2: "hostB", 3: "hostC"}
    ports = host_ports.task_ports(placed, 5)
    assert len(ports) == 5
    assert ports[1] != ports[2]  # hostB's tasks
    assert ports[0] != ports[4]  # this machine's task and placeholder


def test_an_unreachable_host_is_named_with_ssh_s_error():
    client = [
        "sh",
        "-c",
        "echo 'ssh: connect to host hostB port 22: Connection refused' >&2;"
        " exit 255",
        "ssh",
    ]
    with pytest.raises(HostPortsError) as raised:
        host_ports.query_ports("hostB", 2, client)
    message = str(raised.value)
    assert raised.value.host == "hostB"
    assert raised.value.returncode == 255
    assert "could not choose free ports on host hostB" in message
    assert "could not reach host hostB" in message
    assert message.endswith("Connection refused")


def test_a_host_that_answers_no_ports_is_named():
    # ssh succeeded, but the remote side printed no ports (e.g. another
    # program under that interpreter path).
    client = ["sh", "-c", "echo 'not the ports'", "ssh"]
    with pytest.raises(HostPortsError, match="host hostC.*exit code 0"):
        host_ports.query_ports("hostC", 1, client)
