"""An elastic job whose discovery names other hosts, over real ssh.

Two network namespaces act as hosts `hostA` and `hostB`, each running its
own sshd (`keras_hybrid.emulation.hosts`); the launcher runs in the
root namespace and starts every worker over ssh. Discovery first prints
`hostA:2`, then `hostA:2` and `hostB:2` once training runs (hostB's
address is not in the members' cluster: they serve again on one that has
it, then the joiners start on hostB: 2 -> 4 across hosts), then `hostA:2`
and `hostB:1` (4 -> 3: task 3 on hostB retires). The plain `fit` script
(`tests/elastic/workers/elastic_fit_worker.py`, a partitioned
`Embedding` with Adam beside a dense part; plans over the launcher's TCP
server, tables committed to its commit server: the served store, the
default without a shared --commit-dir) records `strategy.size` in a
callback; the sizes must show 2, 4, 3, each of the 80 steps once, and
the final weights, table included, equal one process (1e-5). No worker is
left on either host. A second test kills the worker on hostB: the
launcher names its host and rank, and the survivors recover, its table
rows fetched from the launcher's commit server.

Needs root and OpenSSH's server, like tests/launch/test_multihost_ssh.py:
skips with the reason otherwise.
"""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from keras_hybrid.emulation import hosts as emulated_hosts
from keras_hybrid.launch.ssh import SSH_COMMAND_ENV
from keras_hybrid.testing import plan_text
from tests.launch.elastic.host_port_range import HostPortRange

HERE = os.path.dirname(os.path.abspath(__file__))
ELASTIC_WORKERS = os.path.join(HERE, "..", "..", "elastic", "workers")
WORKER = os.path.join(ELASTIC_WORKERS, "elastic_fit_worker.py")
TIMEOUT = 240

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.netns,
    pytest.mark.timeout(TIMEOUT + 60),
]


@pytest.fixture(scope="module")
def hosts():
    problem = emulated_hosts.install_problem()
    if problem:
        pytest.skip(f"multi-host elastic jobs not tested: {problem}")
    # A subnet of its own: test_multihost_ssh.py may run beside it.
    with emulated_hosts.EmulatedHosts(
        ["hostA", "hostB"], subnet="10.78.0"
    ) as emulated:
        yield emulated


def _write(path, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _sizes(out_dir) -> list:
    path = os.path.join(out_dir, "progress.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["size"] for line in f if line.endswith("\n")]


def _drive(proc, out_dir, slots, lines) -> None:
    """Rewrites the discovery output as training goes (see module)."""
    deadline = time.monotonic() + TIMEOUT
    stage = 0
    while time.monotonic() < deadline and proc.poll() is None:
        sizes = _sizes(out_dir)
        if stage == 0 and sizes:
            _write(slots, "hostA:2\nhostB:2\n")
            stage = 1
        elif stage == 1 and any("-> 4 workers" in x for x in lines):
            os.remove(os.path.join(out_dir, "hold"))
            stage = 2
        elif stage == 2 and sizes.count(4) >= 3:
            _write(slots, "hostA:2\nhostB:1\n")
            stage = 3
        elif stage == 3 and sizes.count(3) >= 3:
            os.remove(os.path.join(out_dir, "pace"))
            return
        time.sleep(0.1)


def _run_job(
    hosts, tmp_path, first_slots, drive, hold_at_step, epochs=2
) -> tuple:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    slots = tmp_path / "slots"
    script = tmp_path / "hosts.sh"
    script.write_text(f"#!/bin/sh\ncat {slots}\n")
    script.chmod(0o755)
    _write(slots, first_slots)
    _write(out_dir / "pace", "")
    _write(out_dir / "hold", "")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "keras_hybrid.run"),
            *("--min-np", "2", "--max-np", "4", "--threads", "1"),
            *("--host-discovery-script", str(script)),
            *("--discovery-interval", "0.2", "--grace_seconds", "3"),
            "--commit-interval",
            "5",
            *(sys.executable, WORKER, f"--out_dir={out_dir}"),
            *(f"--epochs={epochs}", "--batch_size=12", "--num_samples=480"),
            *("--step_sleep=0.1", f"--hold_at_step={hold_at_step}"),
            "--model=table",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            SSH_COMMAND_ENV: hosts.ssh_command,
        },
    )
    lines: list = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")),
        daemon=True,
    )
    reader.start()
    try:
        drive(proc, out_dir, slots, lines)
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    return proc.returncode, "".join(lines), out_dir


def _story(output: str) -> str:
    """The launcher's lines and the workers' recoveries and errors, cut to
    fit a CI log: why a job resized, when the resizes are not the expected
    ones (the whole log's tail is too long to show beside them)."""
    keep = (
        "keras-hybrid-run:",
        "recovers after",
        "recovered as",
        "retires",
        "Error",
        "Traceback",
    )
    lines = [
        line[:240]
        for line in output.splitlines()
        if any(k in line for k in keep) and "oneDNN" not in line
    ]
    return "\n".join(lines[-80:])


def _wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def test_grow_onto_a_new_host_then_shrink_equals_one_process(hosts, tmp_path):
    code, output, out_dir = _run_job(hosts, tmp_path, "hostA:2\n", _drive, 30)
    assert code == 0, output[-8000:]
    # Plans travelled over TCP to the address hostA reaches us on.
    assert "plans are served at 10.78.0.254:" in output, output[-4000:]
    # Every worker started over ssh, on its host.
    for where in ("task 0 on host hostA", "task 3 on host hostB"):
        assert f"started {where}" in output, output[-4000:]
    with open(out_dir / "rank0.pkl", "rb") as f:
        result = pickle.load(f)
    sizes = _sizes(out_dir)
    changes = [s for i, s in enumerate(sizes) if i == 0 or sizes[i - 1] != s]
    assert changes == [2, 4, 3], output[-4000:]
    # The re-address came at a step boundary: no step lost or repeated.
    assert len(sizes) == 80, sizes  # 2 epochs of 40 global batches
    resizes = result["resizes"]
    assert [(r["reason"], r["old_size"], r["new_size"]) for r in resizes] == [
        ("readdress", 2, 2),
        ("discovery", 2, 4),
        ("discovery", 4, 3),
    ], f"why the job resized:\n{_story(output)}"
    for r in resizes:
        print(
            f"{r['reason']} {r['old_size']}->{r['new_size']} at step "
            f"{r['global_step']}: stall {r['stall_seconds']:.3f} s, "
            f"switch {r.get('switch_seconds', 0.0):.3f} s, normal step "
            f"{r.get('normal_step_seconds', 0.0):.3f} s, "
            f"{r['bytes_moved']} bytes moved"
        )
    _check_weights(result)
    for name in ("hostA", "hostB"):
        _wait_until(lambda n=name: not hosts.worker_pids(n), 30, name)


def _check_weights(result, epochs=2) -> None:
    """The final weights, table included, equal one process (1e-5)."""
    sys.path.insert(0, ELASTIC_WORKERS)
    try:
        import elastic_cases as cases
    finally:
        sys.path.remove(ELASTIC_WORKERS)
    assert plan_text.partitioned(result["plan"], "table/embeddings"), result[
        "plan"
    ]
    reference = cases.table_reference(result["initial"], epochs=epochs)
    for got, want in zip(result["weights"], reference, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def _worker_on(hosts, name: str) -> int | None:
    """The pid of the training process (not its guard) on host `name`."""
    for pid in hosts.worker_pids(name):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"elastic_fit_worker.py") for a in argv) and not any(
            b"remote_guard" in a for a in argv
        ):
            return pid
    return None


def test_a_lost_remote_worker_is_recovered(hosts, tmp_path):
    """hostA:2 and hostB:1 from the start; the worker on hostB is killed
    at step 12 (commits every 5 steps); the launcher names its host and
    rank, the survivors on hostA replay from the last commit, and the
    weights equal one process."""

    def drive(proc, out_dir, slots, lines):
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_sizes(out_dir)) >= 12:
                os.kill(_worker_on(hosts, "hostB"), signal.SIGKILL)
                break
            time.sleep(0.05)
        while time.monotonic() < deadline and proc.poll() is None:
            if any("exited with" in x for x in lines):
                # hostB is gone from discovery too: no joiner replaces it.
                _write(slots, "hostA:2\n")
                os.remove(os.path.join(out_dir, "pace"))
                return
            time.sleep(0.05)

    code, output, out_dir = _run_job(
        hosts, tmp_path, "hostA:2\nhostB:1\n", drive, 0, epochs=1
    )
    assert code == 0, output[-8000:]
    assert "rank 2 (task 2 on host hostB) exited with code 137" in output, (
        output[-4000:]
    )
    # hostB's rows came back from the launcher's host, not a shared disk.
    assert re.search(
        r"committed to files under \S+ served at 10.78.0.254:", output
    )
    with open(out_dir / "rank0.pkl", "rb") as f:
        result = pickle.load(f)
    assert [
        (r["reason"], r["old_size"], r["new_size"]) for r in result["resizes"]
    ] == [("lost_worker", 3, 2)], f"why the job resized:\n{_story(output)}"
    _check_weights(result, epochs=1)


def test_a_one_host_job_grows_onto_another_host(hosts, tmp_path):
    """Discovery names only this host (the root namespace) at first: its
    two workers serve on loopback, read plans from files and commit to a
    folder under /dev/shm. Then it names hostB:2 too: the job widens (the
    members serve again on the address hostB reaches, a re-address at a
    step boundary) and grows 2 -> 4; the worker on hostB, whose rows it
    uploaded to the launcher's commit server, is killed, and a survivor
    here reads them from the folder: 4 -> 3, weights equal to one
    process. Until the job is 4 workers, hostB picks free ports from a
    range below the launcher's: its workers serve on ports hostB chose."""

    def drive(proc, out_dir, slots, lines):
        deadline = time.monotonic() + TIMEOUT
        stage = 0
        killed_at = 0
        while time.monotonic() < deadline and proc.poll() is None:
            sizes = _sizes(out_dir)
            if stage == 0 and sizes:
                _write(slots, "localhost:2\nhostB:2\n")
                stage = 1
            elif stage == 1 and any("-> 4 workers" in x for x in lines):
                # Grown onto hostB: its usual range again for the loss.
                taken.release()
                os.remove(os.path.join(out_dir, "hold"))
                stage = 2
            elif stage == 2 and sizes.count(4) >= 12:
                killed_at = len(lines)
                os.kill(_worker_on(hosts, "hostB"), signal.SIGKILL)
                stage = 3
            elif stage == 3 and any(
                "exited with" in x for x in lines[killed_at:]
            ):
                _write(slots, "localhost:2\nhostB:1\n")
                os.remove(os.path.join(out_dir, "pace"))
                return
            time.sleep(0.05)

    with HostPortRange(hosts, "hostB") as taken:
        code, output, out_dir = _run_job(
            hosts, tmp_path, "localhost:2\n", drive, 30
        )
    assert code == 0, output[-8000:]
    assert "named other hosts ['hostB']" in output, output[-4000:]
    readdress = re.search(
        r"re-address for joiners.* on new ports (\[.*\])", output
    )
    assert readdress, output[-4000:]
    cluster = json.loads(readdress.group(1).replace("'", '"'))
    low, high = taken.host_range
    on_b = [int(a.rpartition(":")[2]) for a in cluster[2:]]
    assert len(set(on_b)) == 2 and all(low <= p <= high for p in on_b), cluster
    for asked in re.findall(
        r"free ports asked of hosts \['hostB'\] in \S+ s", output
    ):
        print(asked)
    assert "plans are served at 10.78.0.254:" in output, output[-4000:]
    assert re.search(
        r"commits under /dev/shm/\S+ are served to other hosts at "
        r"10.78.0.254:",
        output,
    ), output[-4000:]
    assert "started task 2 on host hostB" in output, output[-4000:]
    with open(out_dir / "rank0.pkl", "rb") as f:
        result = pickle.load(f)
    assert [
        (r["reason"], r["old_size"], r["new_size"]) for r in result["resizes"]
    ] == [
        ("readdress", 2, 2),
        ("discovery", 2, 4),
        ("lost_worker", 4, 3),
    ], f"why the job resized:\n{_story(output)}"
    _check_weights(result)
    _wait_until(lambda: not hosts.worker_pids("hostB"), 30, "hostB")
