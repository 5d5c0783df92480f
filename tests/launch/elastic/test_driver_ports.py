"""The elastic launcher's ports for tasks on other hosts come from those
hosts (`keras_hybrid.launch.elastic.host_ports`), with plain-Python workers and
an ssh stand-in (the job trains on them over real ssh in
tests/launch/elastic/test_multihost.py)."""

import json
import os
import subprocess
import sys

import pytest

from keras_hybrid.launch.ssh import SSH_COMMAND_ENV

CLI = [sys.executable, "-m", "keras_hybrid.run"]
pytestmark = pytest.mark.multiprocess

# ssh stand-in: skips `-o OPTION` pairs and runs the remote command here
# with FAKE_HOST set to the host it was given; ssh's configuration names
# hostY 127.0.0.3. hostZ cannot be reached. The port query's answer is
# also written to $FAKE_PORTS_LOG as `host ports...`, to compare with the
# cluster the workers get.
_FAKE_SSH = """#!/bin/sh
while [ "$1" = "-o" ]; do shift 2; done
if [ "$1" = "-G" ]; then echo "hostname 127.0.0.3"; exit 0; fi
if [ "$1" = "hostZ" ]; then
  echo "ssh: connect to host hostZ port 22: No route to host" >&2
  exit 255
fi
case "$2" in
  *keras_hybrid.launch.elastic.host_ports*)
    out=$(sh -c "$2") || exit
    echo "$1 $out" >> "$FAKE_PORTS_LOG"
    echo "$out"
    exit 0;;
esac
FAKE_HOST="$1" exec sh -c "$2"
"""

_WORKER = """
import json, os, sys, time
DEADLINE = time.monotonic() + 180
from keras_hybrid.contract.plan_channel import channel_from_env
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
channel = channel_from_env()
slots, more = sys.argv[1], sys.argv[2]
def wait(name):
    while channel.get(name) is None:
        time.sleep(0.05)
    if time.monotonic() > DEADLINE:
        sys.exit('stand-in worker: gave up waiting')
        if time.monotonic() > DEADLINE:
            sys.exit('stand-in worker: gave up waiting')
    return json.loads(channel.get(name))
print(json.dumps({"task": task, "host": os.environ.get("FAKE_HOST", "-"),
                  "cluster": json.loads(os.environ["TF_CONFIG"])
                  ["cluster"]["worker"]}))
if task == 0:
    with open(slots + ".tmp", "w") as f:
        f.write("localhost:2\\n" + more + "\\n")
    os.replace(slots + ".tmp", slots)
    print(json.dumps({"plan1": wait("plan-1.json")}))
    channel.put("recovered-1.json", "{}")
    # Joiners write to the launcher's TCP board, members read files.
    while not all(os.path.exists(f"{slots}.{t}") for t in (2, 3)):
        time.sleep(0.05)
    if time.monotonic() > DEADLINE:
        sys.exit('stand-in worker: gave up waiting')
        if time.monotonic() > DEADLINE:
            sys.exit('stand-in worker: gave up waiting')
elif task in (2, 3):
    open(f"{slots}.{task}", "w").close()
"""


def _run(tmp_path, more: str) -> tuple:
    """A job that starts here with 2 tasks, then discovery adds `more`."""
    fake_ssh = tmp_path / "fake_ssh"
    fake_ssh.write_text(_FAKE_SSH)
    fake_ssh.chmod(0o755)
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    script = tmp_path / "hosts.sh"
    script.write_text(f"#!/bin/sh\ncat {slots}\n")
    script.chmod(0o755)
    log = tmp_path / "ports.log"
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "4"]
        + ["--elastic-address", "127.0.0.1"]
        + ["--discovery-interval", "0.1", "--grace_seconds", "1"]
        + ["--host-discovery-script", str(script)]
        + [sys.executable, "-c", _WORKER, str(slots), more],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            SSH_COMMAND_ENV: str(fake_ssh),
            "FAKE_PORTS_LOG": str(log),
        },
    )
    lines = [line.partition("] ")[2] for line in proc.stdout.splitlines()]
    seen = [json.loads(line) for line in lines if line.startswith("{")]
    asked = log.read_text().splitlines() if log.exists() else []
    return proc, seen, asked


def test_tasks_on_another_host_get_ports_that_host_chose(tmp_path):
    """Discovery adds hostY:2 to a job on this host: the re-address asks
    hostY (once, through ssh) for two ports, and the joiners there serve
    on exactly those; this host's tasks keep ports chosen here."""
    proc, seen, asked = _run(tmp_path, "hostY:2")
    assert proc.returncode == 0, proc.stderr
    assert "started task 3 on host hostY (joiner)" in proc.stderr
    assert "free ports asked of hosts ['hostY'] in" in proc.stderr
    # The first plan, on this host only, asked nobody.
    (answer,) = asked
    host, marker, *ports = answer.split()
    assert (host, marker) == ("hostY", "keras-hybrid-ports:")
    assert len(set(ports)) == 2
    tasks = {r["task"]: r for r in seen if "task" in r}
    assert {t: r["host"] for t, r in tasks.items()} == {
        0: "-",
        1: "-",
        2: "hostY",
        3: "hostY",
    }
    (plan,) = [r["plan1"] for r in seen if "plan1" in r]
    assert plan["reason"] == "readdress"
    assert plan["cluster"][2:] == [f"127.0.0.3:{p}" for p in ports]
    assert tasks[2]["cluster"] == tasks[3]["cluster"] == plan["cluster"]
    here = [a.rpartition(":")[2] for a in plan["cluster"][:2]]
    assert len(set(here)) == 2 and not set(here) & set(ports)


def test_a_host_that_cannot_be_asked_stops_the_job_with_its_name(tmp_path):
    """hostZ cannot be reached: the launcher names it with ssh's error,
    as for a worker that fails to start there, stops the members and
    exits with ssh's code; no worker starts on hostZ."""
    proc, seen, asked = _run(tmp_path, "hostZ:1")
    assert proc.returncode == 255, proc.stderr
    assert (
        "could not choose free ports on host hostZ: the query over ssh "
        "ended with exit code 255 (ssh's own failure code: it could not "
        "reach host hostZ, or lost the connection to it): ssh: connect to "
        "host hostZ port 22: No route to host; stopping the job."
    ) in proc.stderr
    assert "on host hostZ (joiner)" not in proc.stderr
    assert asked == []
    assert not [r for r in seen if "plan1" in r]  # no re-address written
