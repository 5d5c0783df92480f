"""The elastic launcher's flags, discovery and start, with plain-Python
workers (the switch itself is tested with TensorFlow in
tests/elastic/test_resize_multiprocess.py)."""

import json
import os
import re
import subprocess
import sys

import pytest

from keras_hybrid.launch.elastic.driver import check_bounds
from keras_hybrid.launch.elastic.host_discovery import HostDiscovery
from keras_hybrid.launch.elastic.host_discovery import parse_slots
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV

CLI = [sys.executable, "-m", "keras_hybrid.run"]
pytestmark = pytest.mark.multiprocess


def _script(tmp_path, text):
    path = tmp_path / "hosts.sh"
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(0o755)
    return str(path)


def test_parse_slots_reads_host_and_slots_lines():
    text = "# hosts\nlocalhost:2\n\n127.0.0.1\n"
    assert parse_slots(text) == [("localhost", 2), ("127.0.0.1", 1)]


def test_parse_slots_rejects_a_malformed_line():
    with pytest.raises(ValueError, match="must be `host:slots`"):
        parse_slots("localhost:two")


def test_discovery_keeps_the_last_answer_when_the_script_fails(tmp_path):
    slots = tmp_path / "slots"
    slots.write_text("localhost:3\n")
    discovery = HostDiscovery(_script(tmp_path, f"cat {slots}"))
    assert discovery.total() == 3
    slots.unlink()  # cat fails
    assert discovery.total() == 3


def test_bounds_need_one_worker_at_least():
    check_bounds(1, 4)
    with pytest.raises(ValueError, match="1 <= --min-np <= --max-np"):
        check_bounds(0, 4)
    with pytest.raises(ValueError, match="Received: --min-np 4, --max-np 3"):
        check_bounds(4, 3)


def test_cli_rejects_a_starting_np_outside_the_bounds(tmp_path):
    proc = subprocess.run(
        [*CLI, "-np", "4", "--min-np", "2", "--max-np", "3"]
        + ["--host-discovery-script", _script(tmp_path, "echo localhost:2")]
        + [sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "-np is the number of workers to start with" in proc.stderr


def test_cli_rejects_a_commit_dir_with_the_served_store(tmp_path):
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--commit-store", "served"]
        + ["--commit-dir", str(tmp_path)]
        + ["--host-discovery-script", _script(tmp_path, "echo localhost:2")]
        + [sys.executable, "-c", "raise SystemExit(3)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "the served store keeps its files on the launcher" in proc.stderr


def test_too_few_slots_fail_after_the_timeout(tmp_path):
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "3", "--elastic-timeout", "0.5"]
        + ["--discovery-interval", "0.1"]
        + ["--host-discovery-script", _script(tmp_path, "echo localhost:1")]
        + [sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "fewer than --min-np 2" in proc.stderr


def test_members_get_the_max_np_cluster_and_the_members(tmp_path):
    worker = (
        "import json, os; print(json.dumps({k: v for k, v in "
        "os.environ.items() if k.startswith(('KERAS_HYBRID_ELASTIC', "
        "'TF_CONFIG'))}))"
    )
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "4"]
        + ["--host-discovery-script", _script(tmp_path, "echo localhost:2")]
        + [sys.executable, "-c", worker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    envs = {}
    for line in proc.stdout.splitlines():
        rank, _, payload = line.partition("] ")
        envs[int(rank.lstrip("["))] = json.loads(payload)
    assert sorted(envs) == [0, 1]
    for task, env in envs.items():
        config = json.loads(env["TF_CONFIG"])
        assert len(config["cluster"]["worker"]) == 4
        assert config["task"]["index"] == task
        assert env["KERAS_HYBRID_ELASTIC_MEMBERS"] == "0,1"
        assert env["KERAS_HYBRID_ELASTIC_MAX_NP"] == "4"


_LOSER = """
import json, os, signal, sys, time
DEADLINE = time.monotonic() + 180
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
d = os.environ["KERAS_HYBRID_ELASTIC_DIR"]
if not os.environ.get("KERAS_HYBRID_ELASTIC_MEMBERS"):
    time.sleep(600)  # a joiner that never gets ready
if task == 2:
    os.kill(os.getpid(), signal.SIGKILL)
def wait(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.05)
    if time.monotonic() > DEADLINE:
        sys.exit('stand-in worker: gave up waiting')
        if time.monotonic() > DEADLINE:
            sys.exit('stand-in worker: gave up waiting')
    with open(os.path.join(d, name)) as f:
        return json.load(f)
plan = wait("recover-1.json")
old = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
interval = os.environ["KERAS_HYBRID_ELASTIC_COMMIT_INTERVAL"]
print(json.dumps({"task": task, "plan": plan, "old": old,
                  "interval": interval, "dir": d}))
if task == 0:
    with open(os.path.join(d, "recovered-1.json"), "w") as f:
        f.write("{}")
    print(json.dumps({"plan1": wait("plan-1.json")}))
"""


def test_a_lost_member_gets_a_recovery_plan_on_new_ports(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "3", "--commit-interval", "7"]
        + ["--discovery-interval", "0.1", "--grace_seconds", "1"]
        + ["--host-discovery-script", _script(tmp_path, "echo localhost:3")]
        + [sys.executable, "-c", _LOSER],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert proc.returncode == 0, proc.stderr
    # The job's plan folder (under TMPDIR) held the plans read below, and
    # the launcher removed it when the job ended.
    assert "keras_hybrid_elastic_" in proc.stdout
    assert os.listdir(scratch) == []
    assert "rank 2 (task 2) exited with code -9" in proc.stderr
    lines = [line.partition("] ")[2] for line in proc.stdout.splitlines()]
    seen = [json.loads(line) for line in lines if line.startswith("{")]
    survivors = {r["task"]: r for r in seen if "task" in r}
    assert sorted(survivors) == [0, 1]
    for report in survivors.values():
        plan = report["plan"]
        assert plan["members"] == [0, 1]
        assert plan["lost"] == [2]
        assert plan["reason"] == "lost_worker"
        assert len(plan["cluster"]) == 3
        assert not set(plan["cluster"]) & set(report["old"])
        assert report["interval"] == "7"
    (plan1,) = [r["plan1"] for r in seen if "plan1" in r]
    assert plan1["members"] == [0, 1]
    assert plan1["reason"] == "lost_worker"


def test_too_few_left_fail_after_the_timeout(tmp_path):
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    worker = (
        "import json, os, signal, time\n"
        "task = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "if task == 1:\n"
        f"    open({str(slots)!r}, 'w').write('localhost:1\\n')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "2", "--elastic-timeout", "1"]
        + ["--discovery-interval", "0.1", "--grace_seconds", "1"]
        + ["--host-discovery-script", _script(tmp_path, f"cat {slots}")]
        + [sys.executable, "-c", worker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert (
        "lost task(s) [1]: 1 worker(s) left (tasks [0]), fewer than "
        "--min-np 2, and host discovery reported 1 slot(s) for 1 s"
        in proc.stderr
    )


_FAKE_SSH = """#!/bin/sh
# ssh stand-in: skips `-o OPTION` pairs, then runs the remote command here
# with FAKE_HOST set to the host it was given; every host is this one, but
# ssh's configuration names each by a loopback address of its own.
while [ "$1" = "-o" ]; do shift 2; done
if [ "$1" = "-G" ]; then
  case "$2" in
    hostY) echo "hostname 127.0.0.3";;
    *) echo "hostname 127.0.0.2";;
  esac
  exit 0
fi
FAKE_HOST="$1" exec sh -c "$2"
"""

_READDRESSED = """
import json, os, sys, time
DEADLINE = time.monotonic() + 180
from keras_hybrid.contract.plan_channel import channel_from_env
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
channel = channel_from_env()
slots = sys.argv[1]
def wait(name):
    while channel.get(name) is None:
        time.sleep(0.05)
    if time.monotonic() > DEADLINE:
        sys.exit('stand-in worker: gave up waiting')
        if time.monotonic() > DEADLINE:
            sys.exit('stand-in worker: gave up waiting')
    return json.loads(channel.get(name))
print(json.dumps({"task": task, "host": os.environ["FAKE_HOST"],
                  "tcp": "KERAS_HYBRID_ELASTIC_CHANNEL" in os.environ,
                  "commits": os.environ["KERAS_HYBRID_ELASTIC_COMMIT_SERVER"],
                  "cluster": json.loads(os.environ["TF_CONFIG"])
                  ["cluster"]["worker"]}))
if task == 0:
    with open(slots + ".tmp", "w") as f:
        f.write("hostX:2\\nhostY:1\\n")
    os.replace(slots + ".tmp", slots)
    print(json.dumps({"plan1": wait("plan-1.json")}))
    channel.put("recovered-1.json", "{}")
    wait("joined")
elif task == 2:
    channel.put("joined", "{}")
"""


@pytest.mark.parametrize("shared_dir", [False, True])
def test_a_joiner_on_a_new_host_comes_after_a_readdress(tmp_path, shared_dir):
    """Discovery names hostX, then hostY too: tasks run on their hosts
    (through the ssh client), the members get a readdress plan whose
    cluster names hostY, and the joiner starts there on that cluster.
    Plans travel over the launcher's TCP server, or through files in a
    shared `--elastic-dir`."""
    fake_ssh = tmp_path / "fake_ssh"
    fake_ssh.write_text(_FAKE_SSH)
    fake_ssh.chmod(0o755)
    slots = tmp_path / "slots"
    slots.write_text("hostX:2\n")
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "3"]
        + (["--elastic-dir", str(tmp_path)] if shared_dir else [])
        + ["--discovery-interval", "0.1", "--grace_seconds", "1"]
        + ["--host-discovery-script", _script(tmp_path, f"cat {slots}")]
        + [sys.executable, "-c", _READDRESSED, str(slots)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, SSH_COMMAND_ENV: str(fake_ssh)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "started task 2 on host hostY (joiner)" in proc.stderr
    # No shared /dev/shm: the launcher serves the commit files.
    served = re.search(
        r"committed to files under \S+ served at (\S+)", proc.stderr
    )
    assert served, proc.stderr
    lines = [line.partition("] ")[2] for line in proc.stdout.splitlines()]
    seen = [json.loads(line) for line in lines if line.startswith("{")]
    tasks = {r["task"]: r for r in seen if "task" in r}
    assert {r["tcp"] for r in tasks.values()} == {not shared_dir}
    assert {r["commits"] for r in tasks.values()} == {served.group(1)}
    assert {t: r["host"] for t, r in tasks.items()} == {
        0: "hostX",
        1: "hostX",
        2: "hostY",
    }
    # Tasks are named in the cluster as ssh reaches their hosts.
    old = tasks[0]["cluster"]
    assert [a.rpartition(":")[0] for a in old] == [
        "127.0.0.2",
        "127.0.0.2",
        "127.0.0.1",  # not placed yet: never contacted
    ]
    (plan,) = [r["plan1"] for r in seen if "plan1" in r]
    assert plan["reason"] == "readdress"
    assert plan["members"] == [0, 1] and plan["lost"] == []
    assert [a.rpartition(":")[0] for a in plan["cluster"]] == [
        "127.0.0.2",
        "127.0.0.2",
        "127.0.0.3",
    ]
    assert not set(plan["cluster"]) & set(old)  # new ports for everyone
    assert tasks[2]["cluster"] == plan["cluster"]


_WIDENED = """
import json, os, sys, time
DEADLINE = time.monotonic() + 180
from keras_hybrid.contract.commit_files import CommitFiles
from keras_hybrid.contract.commit_server import commit_files_from_env
from keras_hybrid.contract.plan_channel import channel_from_env
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
channel = channel_from_env()
slots, marker = sys.argv[1], sys.argv[2]
def wait(name):
    while channel.get(name) is None:
        time.sleep(0.05)
    if time.monotonic() > DEADLINE:
        sys.exit('stand-in worker: gave up waiting')
        if time.monotonic() > DEADLINE:
            sys.exit('stand-in worker: gave up waiting')
    return json.loads(channel.get(name))
print(json.dumps({"task": task, "host": os.environ.get("FAKE_HOST", "-"),
                  "tcp": "KERAS_HYBRID_ELASTIC_CHANNEL" in os.environ,
                  "dir": os.environ["KERAS_HYBRID_ELASTIC_COMMIT_DIR"],
                  "server": os.environ["KERAS_HYBRID_ELASTIC_COMMIT_SERVER"],
                  "cluster": json.loads(os.environ["TF_CONFIG"])
                  ["cluster"]["worker"]}))
if task == 0:
    with open(slots + ".tmp", "w") as f:
        f.write("localhost:2\\nhostY:1\\n")
    os.replace(slots + ".tmp", slots)
    print(json.dumps({"plan1": wait("plan-1.json")}))
    channel.put("recovered-1.json", "{}")
    while not os.path.exists(marker):
        time.sleep(0.05)
    if time.monotonic() > DEADLINE:
        sys.exit('stand-in worker: gave up waiting')
        if time.monotonic() > DEADLINE:
            sys.exit('stand-in worker: gave up waiting')
    files = CommitFiles(os.environ["KERAS_HYBRID_ELASTIC_COMMIT_DIR"])
    print(json.dumps({"blob": files.read("commit-5-g1", 2).decode()}))
elif task == 2:
    commit_files_from_env().write(
        "commit-5-g1", 2, lambda f: f.write(b"rows of task 2"))
    open(marker, "w").close()
"""


def test_a_one_host_job_widens_when_discovery_names_another_host(tmp_path):
    """A job that started on this host only grows onto hostY: the members
    (plans from files, commits to a folder under /dev/shm) get a readdress
    plan whose cluster has their tasks on --elastic-address and hostY;
    the joiner there reads plans from the launcher's TCP board and commits
    through the launcher's server into the members' folder."""
    fake_ssh = tmp_path / "fake_ssh"
    fake_ssh.write_text(_FAKE_SSH)
    fake_ssh.chmod(0o755)
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "3"]
        + ["--elastic-address", "127.0.0.1"]
        + ["--discovery-interval", "0.1", "--grace_seconds", "1"]
        + ["--host-discovery-script", _script(tmp_path, f"cat {slots}")]
        + [sys.executable, "-c", _WIDENED, str(slots), str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, SSH_COMMAND_ENV: str(fake_ssh)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "named other hosts ['hostY']" in proc.stderr
    assert "started task 2 on host hostY (joiner)" in proc.stderr
    lines = [line.partition("] ")[2] for line in proc.stdout.splitlines()]
    seen = [json.loads(line) for line in lines if line.startswith("{")]
    tasks = {r["task"]: r for r in seen if "task" in r}
    assert {t: (r["host"], r["tcp"]) for t, r in tasks.items()} == {
        0: ("-", False),
        1: ("-", False),
        2: ("hostY", True),
    }
    folder = tasks[0]["dir"]
    assert folder.startswith("/dev/shm/") and not tasks[0]["server"]
    assert tasks[2]["server"] and not tasks[2]["dir"]
    (plan,) = [r["plan1"] for r in seen if "plan1" in r]
    assert plan["reason"] == "readdress"
    assert [a.rpartition(":")[0] for a in plan["cluster"]] == [
        "127.0.0.1",
        "127.0.0.1",
        "127.0.0.3",
    ]
    assert tasks[2]["cluster"] == plan["cluster"]
    # The joiner's upload landed in the members' folder.
    assert [r["blob"] for r in seen if "blob" in r] == ["rows of task 2"]
    assert not os.path.exists(folder)  # removed at the end
