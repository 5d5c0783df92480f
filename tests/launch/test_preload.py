"""Local workers forked from the preloading fork server (`launch.preloader`).

The tests preload a small standard-library module the scripts never
import themselves (`PRELOADED`), so finding it in a worker's `sys.modules`
shows the worker is a fork of the server; TensorFlow is preloaded by the
elastic and first-hour tests, whose scripts name it (`auto`).
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from keras_hybrid.launch import launch
from keras_hybrid.launch.preloader import Preloader
from keras_hybrid.launch.preloader import parse_modules
from tests.launch.launch_testing import is_alive
from tests.launch.launch_testing import lines_by_rank
from tests.launch.launch_testing import wait_for_files
from tests.launch.launch_testing import wait_gone

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

PRELOADED = "xml.dom.minidom"

# Reports what a worker sees of itself as JSON on stdout.
_REPORT = f"""
import json, os, sys
print(json.dumps({{
    "name": __name__,
    "file": __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "rank": os.environ["KERAS_HYBRID_RANK"],
    "cwd": os.getcwd(),
    "preloaded": {PRELOADED!r} in sys.modules,
    "comm": open("/proc/self/comm").read().strip(),
    "session": os.getsid(0) == os.getpid(),
}}))
"""


def _reports(text):
    return {
        r: json.loads(lines[-1]) for r, lines in lines_by_rank(text).items()
    }


def test_workers_fork_from_the_server_and_see_their_own_script(
    tmp_path, capsys
):
    script = tmp_path / "report_self.py"
    script.write_text(_REPORT)
    code = launch([sys.executable, script, "--flag=1"], 2, preload=(PRELOADED,))
    assert code == 0
    reports = _reports(capsys.readouterr().out)
    for rank in (0, 1):
        seen = reports[rank]
        assert seen["preloaded"], seen
        assert seen["name"] == "__main__"
        assert seen["file"] == str(script)
        assert seen["argv"] == [str(script), "--flag=1"]
        assert seen["path0"] == str(tmp_path)
        assert seen["rank"] == str(rank)
        assert seen["cwd"] == os.getcwd()
        assert seen["comm"] == "report_self.py"
        assert seen["session"]


def test_a_module_runs_as_with_python_m(tmp_path, capsys, monkeypatch):
    (tmp_path / "reportpkg").mkdir()
    (tmp_path / "reportpkg" / "__init__.py").write_text("")
    (tmp_path / "reportpkg" / "main.py").write_text(_REPORT)
    monkeypatch.chdir(tmp_path)
    code = launch(
        [sys.executable, "-m", "reportpkg.main", "x"], 1, preload=(PRELOADED,)
    )
    assert code == 0
    seen = _reports(capsys.readouterr().out)[0]
    assert seen["preloaded"] and seen["name"] == "__main__", seen
    assert seen["argv"] == [str(tmp_path / "reportpkg" / "main.py"), "x"]
    assert seen["path0"] == str(tmp_path)


def test_auto_preloads_only_scripts_that_name_keras(tmp_path, capsys):
    script = tmp_path / "plain.py"
    script.write_text(
        "import sys\nprint('tensor' 'flow' in sys.modules, "
        "'-c' in open('/proc/self/cmdline').read().split('\\0'))\n"
    )
    assert launch([sys.executable, script], 1, preload="auto") == 0
    # Not forked: the server would have imported TensorFlow and run -c.
    assert lines_by_rank(capsys.readouterr().out) == {0: ["False False"]}


@pytest.mark.parametrize(
    "body, code",
    [
        ("import sys\nsys.exit(3)\n", 3),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 137),
        ("raise KeyError('lost key')\n", 1),
    ],
)
def test_exit_codes_are_the_scripts(tmp_path, capsys, body, code):
    script = tmp_path / "ends.py"
    script.write_text(body)
    assert launch([sys.executable, script], 2, preload=(PRELOADED,)) == code
    err = capsys.readouterr().err
    if "KeyError" in body:
        # Printed as the interpreter prints it, from the script's frame.
        assert "[0] Traceback (most recent call last):" in err, err
        assert f'[0]   File "{script}", line 1, in <module>' in err, err
        assert "[0] KeyError: 'lost key'" in err
        assert "preload" not in err and "runpy" not in err, err


def test_a_missing_script_fails_as_python_does(tmp_path, capsys):
    missing = tmp_path / "missing.py"
    assert launch([sys.executable, missing], 1, preload=(PRELOADED,)) == 2
    assert "can't open file" in capsys.readouterr().err


def test_workers_draw_different_numpy_streams(tmp_path, capsys):
    script = tmp_path / "draw.py"
    script.write_text("import numpy\nprint(numpy.random.randint(1 << 30))\n")
    assert launch([sys.executable, script], 2, preload=("numpy",)) == 0
    draws = lines_by_rank(capsys.readouterr().out)
    assert draws[0] != draws[1], draws


def test_a_module_that_fails_to_import_turns_the_server_off(
    tmp_path, capsys, caplog
):
    script = tmp_path / "report_self.py"
    script.write_text(_REPORT)
    code = launch([sys.executable, script], 2, preload=("no_such_module_x",))
    assert code == 0
    reports = _reports(capsys.readouterr().out)
    assert not reports[0]["preloaded"] and not reports[1]["preloaded"]
    assert "fork server is off" in caplog.text, caplog.text
    assert "no_such_module_x" in caplog.text


def test_workers_die_with_a_killed_launcher(tmp_path):
    script = tmp_path / "wait.py"
    script.write_text(
        "import os, sys, time\n"
        "open(sys.argv[1] + os.environ['KERAS_HYBRID_RANK'], 'w')"
        ".write(str(os.getpid()))\n"
        "time.sleep(300)\n"
    )
    prefix = str(tmp_path / "pid.")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "keras_hybrid.run", "-np", "2"]
        + ["--preload", PRELOADED, sys.executable, str(script), prefix],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_files([prefix + "0", prefix + "1"])
        pids = [int(open(prefix + r).read()) for r in "01"]
        assert all(map(is_alive, pids))
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert wait_gone(pids, seconds=5) == []
    finally:
        launcher.kill()
        launcher.wait()


def test_closing_the_server_ends_its_running_workers(tmp_path):
    script = tmp_path / "wait.py"
    script.write_text("import time\ntime.sleep(300)\n")
    preloader = Preloader((PRELOADED,))
    proc = preloader.start([sys.executable, script], dict(os.environ))
    assert proc is not None and proc.poll() is None
    preloader.close()
    # As a worker of a dead launcher: SIGKILL (`PR_SET_PDEATHSIG`).
    assert proc.poll() == -signal.SIGKILL
    assert wait_gone([proc.pid], seconds=5) == []
    # A closed preloader forks nothing more: the caller starts it.
    assert preloader.start([sys.executable, script], dict(os.environ)) is None


def test_parse_modules():
    assert parse_modules(None) == "auto"
    assert parse_modules(" auto ") == "auto"
    assert parse_modules("none") == parse_modules("") == ()
    assert parse_modules("tensorflow, keras") == ("tensorflow", "keras")
    with pytest.raises(ValueError, match=r"Received: 'a b'\."):
        parse_modules("a b")


def test_cli_rejects_a_bad_module_list():
    result = subprocess.run(
        [sys.executable, "-m", "keras_hybrid.run", "-np", "1"]
        + ["--preload", "not a module", "true"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--preload takes `auto`, `none`" in result.stderr
