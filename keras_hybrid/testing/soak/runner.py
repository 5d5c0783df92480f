"""Runs one soak scenario through `keras-hybrid-run` and judges it.

A run ends in one of three outcomes:

- `survived`: the launcher exited 0, the final weights equal the
  uninterrupted run (`model.reference_weights`) within `ATOL`, every
  worker that died was killed by a fault (SIGKILL, no other exit code),
  every worker logged the same `loss` at the same epoch's end, and every
  checkpoint left (`model.keras`, the newest sharded checkpoint) reads
  back as the final state;
- `clean error`: the launcher exited non-zero within the timeout with an
  error that names the cause (`CAUSES`), and what it left reads back;
- `other`: anything else: a hang (killed at the timeout), a process left
  behind, other weights, a crash, a checkpoint that does not read back,
  or a fault that never fired (the run did not test what it names).

Every process of a run carries a variable of the run's own in its
environment; once the launcher has exited, none may be left.
"""

import glob
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
import uuid

from keras_hybrid.launch.lifeline import exit_with_launcher
from keras_hybrid.testing.soak import faults as faults_lib
from keras_hybrid.testing.soak import model as soak_model
from keras_hybrid.testing.soak.scenario import BATCH_SIZE
from keras_hybrid.testing.soak.scenario import EPOCHS
from keras_hybrid.testing.soak.scenario import MIN_NP
from keras_hybrid.testing.soak.scenario import NUM_SAMPLES

ATOL = 1e-5
MARK = "KERAS_HYBRID_SOAK_RUN"
# Errors that name their cause: the launcher's and the workers' own.
CAUSES = (
    r"fewer than --min-np \d+, and host discovery reported",
    r"are lost: their buddy copies were on tasks",
    r"are lost: its commit file .* is missing",
    r"are lost: its buddy copy of .* did not arrive whole",
    r"joiners failed in a row",
)
_EXIT = re.compile(r"task (\d+)(?: on host \S+)? exited with code (-?\d+)")
_LEFT_SECONDS = 5.0  # how long processes may outlive the launcher


def run_scenario(scenario, root: str, timeout: float, cache: dict) -> dict:
    """Runs `scenario` in the folder `root/<name>`; returns its record:
    `outcome`, `why`, `seconds`, the faults that fired, and the
    launcher's output's tail when it did not survive.

    Args:
        scenario: `Scenario`.
        root: String. An existing folder for the runs.
        timeout: Float. Seconds the run may take.
        cache: Dict. References by initial weights (filled here).
    """
    folder = os.path.join(root, scenario.name)
    out = os.path.join(folder, "out")
    os.makedirs(out)
    start = time.monotonic()
    code, output, hung, left = _launch(scenario, folder, out, timeout)
    record = {
        "name": scenario.name,
        "scenario": scenario.describe(),
        "expected": scenario.expected(),
        "seconds": round(time.monotonic() - start, 1),
        "exit_code": code,
        "fired": _fired(out),
    }
    outcome, why = _judge(scenario, out, code, output, hung, left, cache)
    record.update(outcome=outcome, why=why)
    if outcome != "survived":
        record["output_tail"] = output[-4000:]
    return record


def _launch(scenario, folder: str, out: str, timeout: float) -> tuple:
    slots = os.path.join(folder, "slots")
    with open(slots, "w") as f:
        f.write(f"localhost:{scenario.workers}\n")
    hosts = os.path.join(folder, "hosts.sh")
    with open(hosts, "w") as f:
        f.write(f"#!/bin/sh\ncat {slots}\n")
    os.chmod(hosts, 0o755)
    token = uuid.uuid4().hex
    launcher = subprocess.Popen(
        _command(scenario, hosts, slots, out, folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, MARK: token, "TF_CPP_MIN_LOG_LEVEL": "2"},
        start_new_session=True,
        # The job dies with the soak (its workers with the launcher).
        preexec_fn=exit_with_launcher(),
    )
    hung = False
    try:
        output, _ = launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(launcher.pid, signal.SIGKILL)
        output, _ = launcher.communicate()
    deadline = time.monotonic() + _LEFT_SECONDS
    while marked_processes(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = marked_processes(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with open(os.path.join(folder, "output.log"), "w") as f:
        f.write(output)
    return launcher.returncode, output, hung, left


def _command(scenario, hosts: str, slots: str, out: str, folder: str):
    launcher = [
        *(sys.executable, "-m", "keras_hybrid.run", "--threads", "1"),
        # The worker is a module, which `auto` does not preload.
        *("--preload", "tensorflow,keras"),
        *("--host-discovery-script", hosts, "--discovery-interval", "0.3"),
        *("--min-np", str(MIN_NP), "--max-np", str(scenario.max_np)),
        *("--commit-store", scenario.store, "--elastic-timeout", "5"),
        *("--grace_seconds", "3"),
    ]
    if scenario.buddy_copies > 1:
        launcher += ["--buddy-copies", str(scenario.buddy_copies)]
    worker = [
        *(sys.executable, "-m", "keras_hybrid.testing.soak.worker"),
        f"--out_dir={out}",
        f"--faults={faults_lib.dumps(scenario.faults)}",
        f"--slots_file={slots}",
        f"--slots_plan={json.dumps(list(scenario.slots_plan))}",
        f"--epochs={EPOCHS}",
        f"--num_samples={NUM_SAMPLES}",
        f"--batch_size={BATCH_SIZE}",
    ]
    if scenario.save_model:
        worker.append("--save_model")
    if scenario.checkpoint:
        worker.append(f"--checkpoint_dir={os.path.join(folder, 'ckpt')}")
    return launcher + worker


def marked_processes(token: str) -> list:
    """Live processes (not zombies) whose environment has the run's
    `token` (`MARK`)."""
    needle = f"{MARK}={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(name))
    return found


def _fired(out: str) -> list:
    fired = []
    for path in sorted(glob.glob(os.path.join(out, "fired-*"))):
        with open(path) as f:
            text = f.read()
        fired.append(json.loads(text) if text else {"marker": path})
    return fired


def _judge(scenario, out, code, output, hung, left, cache) -> tuple:
    """`(outcome, why)` of a finished run."""
    if hung:
        return "other", "hang: killed at the timeout"
    if left:
        return "other", f"processes left after the launcher: {left}"
    idle = [
        i
        for i in range(len(scenario.faults))
        if not os.path.exists(os.path.join(out, f"fired-{i}"))
    ]
    if idle:
        return "other", f"faults {idle} never fired"
    crashed = [
        (int(t), int(c)) for t, c in _EXIT.findall(output) if int(c) != -9
    ]
    if code != 0:
        causes = [m.group(0) for c in CAUSES if (m := re.search(c, output))]
        if not causes:
            return "other", f"exit code {code} without a named cause"
        problem = _read_back(scenario, out, None)
        if problem:
            return "other", problem
        return "clean error", f"exit code {code}: ...{causes[0]}..."
    if crashed:
        return "other", f"workers exited other than by a fault: {crashed}"
    if not os.path.exists(os.path.join(out, "result.pkl")):
        return "other", "exit code 0 without a result"
    want = _reference(out, cache)
    with open(os.path.join(out, "result.pkl"), "rb") as f:
        got = pickle.load(f)["weights"]
    diff = soak_model.max_difference(got, want)
    if not diff <= ATOL:
        return "other", f"final weights differ by {diff:.3g}"
    problem = _epoch_logs(out) or _read_back(scenario, out, want)
    if problem:
        return "other", problem
    return "survived", f"final weights within {diff:.2g} of the reference"


def _reference(out: str, cache: dict) -> list:
    with open(os.path.join(out, "initial.pkl"), "rb") as f:
        initial = pickle.load(f)
    key = pickle.dumps(initial)
    if key not in cache:
        cache[key] = soak_model.reference_weights(
            initial, NUM_SAMPLES, EPOCHS, BATCH_SIZE
        )
    return cache[key]


def _epoch_logs(out: str) -> str | None:
    """A problem with the workers' `logs["loss"]` at epochs' ends, else
    None: every worker of one generation logs the same loss."""
    path = os.path.join(out, "epoch_logs.jsonl")
    if not os.path.exists(path):
        return "no worker logged an epoch's end"
    groups: dict = {}
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                r = json.loads(line)
                groups.setdefault((r["epoch"], r["generation"]), []).append(r)
    for (epoch, generation), records in groups.items():
        losses = {round(r["loss"], 6) for r in records}
        if len(losses) > 1:
            return (
                f"epoch {epoch} (generation {generation}): workers logged "
                f"different losses {sorted(losses)}"
            )
    return None


def _read_back(scenario, out: str, final) -> str | None:
    """A problem reading back what the run saved, else None: the
    `model.keras` and the newest sharded checkpoint load (a file or
    folder cut short by a fault must never be read back), and, after a
    clean end, hold the `final` weights."""
    import keras

    from keras_hybrid import checkpoint

    path = os.path.join(out, "model.keras")
    if scenario.save_model and os.path.exists(path):
        try:
            saved = keras.saving.load_model(path).get_weights()
        except Exception as error:  # noqa: BLE001 - the verdict itself
            return f"model.keras does not load: {error}"
        if final is not None:
            diff = soak_model.max_difference(saved, final)
            if not diff <= ATOL:
                return f"model.keras differs from the final weights: {diff}"
    folder = os.path.join(os.path.dirname(out), "ckpt")
    if scenario.checkpoint and checkpoint.latest_checkpoint(folder):
        model = soak_model.build_model()
        try:
            checkpoint.restore_checkpoint(model, folder)
        except Exception as error:  # noqa: BLE001 - the verdict itself
            return f"the newest sharded checkpoint does not restore: {error}"
        if final is not None:
            diff = soak_model.max_difference(model.get_weights(), final)
            if not diff <= ATOL:
                return f"the newest checkpoint is not the final state: {diff}"
    return None
