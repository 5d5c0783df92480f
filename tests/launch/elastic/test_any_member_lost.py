"""The elastic launcher when any member dies, the collective leader too,
or several at once, and when a joiner dies before it was admitted; with
plain-Python stand-in workers that read and write the plan board as the
real ones do (the recovery itself is tested with TensorFlow in
tests/elastic/)."""

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "keras_hybrid.run"]
pytestmark = pytest.mark.multiprocess

# A stand-in worker: the tasks named in argv[1] SIGKILL themselves at once;
# the survivors wait for the newest recovery plan, the lowest of them
# (rank 0) marks it recovered and waits for the generation's plan; a
# joiner prints its contract and exits 0.
_WORKER = """
import json, os, signal, sys, time
deadline = time.monotonic() + 60
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
d = os.environ["KERAS_HYBRID_ELASTIC_DIR"]
doomed = [int(t) for t in sys.argv[1].split(",")]
env = {k: os.environ.get(k) for k in (
    "KERAS_HYBRID_ELASTIC_LEADER", "KERAS_HYBRID_ELASTIC_MEMBERS")}
if not env["KERAS_HYBRID_ELASTIC_MEMBERS"]:
    print(json.dumps({"joiner": task, "env": env}), flush=True)
    sys.exit(0)
if task in doomed:
    os.kill(os.getpid(), signal.SIGKILL)

def newest(prefix):
    names = [n for n in os.listdir(d) if n.startswith(prefix)]
    return max(names, key=lambda n: int(n[len(prefix):-5]), default=None)

def wait(name):
    while not os.path.exists(os.path.join(d, name)):
        if time.monotonic() > deadline:
            sys.exit("stand-in worker: no " + name)
        time.sleep(0.05)
    time.sleep(0.2)  # a later plan of the same loss
    with open(os.path.join(d, name)) as f:
        return json.load(f)

plan = wait("recover-1.json")
plan = wait(newest("recover-"))
print(json.dumps({"task": task, "plan": plan, "env": env}), flush=True)
if task == min(plan["members"]):
    g = plan["generation"]
    with open(os.path.join(d, f"recovered-{g}.json"), "w") as f:
        f.write("{}")
    print(json.dumps({"plan_after": wait(f"plan-{g}.json")}), flush=True)
    time.sleep(1.5)  # the launcher starts a joiner for a lost slot
"""


def _script(tmp_path, text):
    path = tmp_path / "hosts.sh"
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(0o755)
    return str(path)


def _run(tmp_path, slots, min_np, max_np, doomed):
    proc = subprocess.run(
        [*CLI, "--min-np", str(min_np), "--max-np", str(max_np)]
        + ["--discovery-interval", "0.1", "--grace_seconds", "1"]
        + ["--host-discovery-script", _script(tmp_path, f"echo {slots}")]
        + [sys.executable, "-c", _WORKER, doomed],
        capture_output=True,
        text=True,
        timeout=90,
    )
    lines = [line.partition("] ")[2] for line in proc.stdout.splitlines()]
    return proc, [json.loads(line) for line in lines if line.startswith("{")]


def test_the_leader_lost_the_survivors_get_another(tmp_path):
    proc, seen = _run(tmp_path, "localhost:3", 2, 3, "0")
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 (task 0) exited with code -9" in proc.stderr
    assert "the collective leader" in proc.stderr
    survivors = {r["task"]: r for r in seen if "task" in r}
    assert sorted(survivors) == [1, 2]
    for report in survivors.values():
        plan = report["plan"]
        assert (plan["members"], plan["lost"]) == ([1, 2], [0])
        assert plan["leader"] == 1
        # Started while task 0 led.
        assert report["env"]["KERAS_HYBRID_ELASTIC_LEADER"] == "0"
    (after,) = [r["plan_after"] for r in seen if "plan_after" in r]
    assert after["members"] == [1, 2]
    # Discovery still reports 3 slots: a joiner takes task 0's index,
    # and learns that task 1 leads now.
    joiners = [r for r in seen if "joiner" in r]
    assert joiners, proc.stderr
    assert joiners[0]["joiner"] == 0
    assert joiners[0]["env"]["KERAS_HYBRID_ELASTIC_LEADER"] == "1"


def test_two_members_lost_at_once_leave_one_recovery(tmp_path):
    proc, seen = _run(tmp_path, "localhost:4", 2, 4, "0,2")
    assert proc.returncode == 0, proc.stderr
    survivors = {r["task"]: r for r in seen if "task" in r}
    assert sorted(survivors) == [1, 3]
    for report in survivors.values():
        plan = report["plan"]
        assert plan["members"] == [1, 3]
        assert plan["leader"] == 1
    # Both deaths usually land in one poll of the launcher: one plan.
    plans = [
        line for line in proc.stderr.splitlines() if "planned (lost" in line
    ]
    assert 1 <= len(plans) <= 2, proc.stderr


def test_a_joiner_that_keeps_failing_stops_the_job(tmp_path):
    slots = tmp_path / "slots"
    slots.write_text("localhost:2\n")
    worker = (
        "import json, os, sys, time\n"
        "if not os.environ.get('KERAS_HYBRID_ELASTIC_MEMBERS'):\n"
        "    sys.exit(3)\n"
        f"open({str(slots)!r}, 'w').write('localhost:3\\n')\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.run(
        [*CLI, "--min-np", "2", "--max-np", "3", "--grace_seconds", "1"]
        + ["--discovery-interval", "0.1"]
        + ["--host-discovery-script", _script(tmp_path, f"cat {slots}")]
        + [sys.executable, "-c", worker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("a joiner that was not admitted yet") == 3
    assert "the members go on" in proc.stderr
    assert "3 joiners failed in a row; stopping the job" in proc.stderr


def test_every_member_lost_stops_with_a_clear_error(tmp_path):
    # Discovery still reports slots, but no survivor holds the commit:
    # the launcher stops, naming why, instead of recovering nobody.
    proc, _ = _run(tmp_path, "localhost:2", 1, 2, "0,1")
    assert proc.returncode == 1, proc.stderr
    assert "no worker is left to hold the last commit" in proc.stderr
    assert "Traceback" not in proc.stderr
