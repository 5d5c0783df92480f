"""Reading worker lines: as a terminal shows them, their level, and the
exceptions they print."""

from keras_hybrid.launch.root_cause import root_cause_lines
from keras_hybrid.launch.worker_output import TracebackReader
from keras_hybrid.launch.worker_output import WarningFilter
from keras_hybrid.launch.worker_output import is_tf_banner
from keras_hybrid.launch.worker_output import level_of
from keras_hybrid.launch.worker_output import render_line


def test_render_keeps_a_redrawn_bars_last_state():
    raw = (
        "\x1b[1m1/4\x1b[0m ━ 3s\b\b\b\b\b\b\b\b\b\b\r\x1b[1m4/4\x1b[0m ━━━━ 9s"
    )
    assert render_line(raw) == "4/4 ━━━━ 9s"
    assert render_line("plain line  ") == "plain line"


def test_levels():
    assert level_of("I1127 10:00:00.000001 1 lib.py:1] x") == "info"
    assert level_of("W1127 10:00:00.000001 1 lib.py:1] x") == "warning"
    cpp = "I0000 00:00:1795769814.454924   21760 port.cc:153] oneDNN"
    assert level_of(cpp) == "info" and is_tf_banner(cpp)
    assert level_of("2026-01-02 10:00:00.1: E tf/x.cc:1] y") == "warning"
    assert level_of("INFO:absl:x") == "info"
    assert level_of("Traceback (most recent call last):") == "warning"
    assert level_of("some text") is None
    assert not is_tf_banner("I1127 10:00:00.000001 1 lib.py:1] x")


def test_warning_filter_keeps_continuations_with_their_record():
    keep = WarningFilter()
    lines = ["free text", "I1127 10:00:00.1 1 a.py:1] plan:", "  row"]
    lines += ["W1127 10:00:00.1 1 a.py:2] careful", "  more"]
    assert [keep.keeps(line) for line in lines] == [
        True,
        False,
        False,
        True,
        True,
    ]


TF_ERROR = "tensorflow.python.framework.errors_impl.InvalidArgumentError"
NODE = "functional_1/item_1/Assert/Assert"
TRACEBACK = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "/home/me/train.py", line 27, in <module>',
        "    model.fit(x, y)",
        '  File "/venv/lib/keras/t.py", line 3, in fit',
        "    raise e",
        f"{TF_ERROR}: Graph execution error:",
        "",
        f"Detected at node {NODE} defined at (most recent call last):",
        '  File "/home/me/train.py", line 27, in <module>',
        "",
        "assertion failed: [Table \\'item/embeddings\\' (replicated) was "
        "looked up with id 1005 on worker 2; valid ids are [0, 1000).]",
        f"\t [[{{{{node {NODE}}}}}]]",
    ]
)


def test_traceback_reader_finds_the_message_and_the_users_frame():
    reader = TracebackReader(lambda: "2", ("/venv/",))
    for line in TRACEBACK.splitlines():
        reader.read(line)
    (error,) = reader.exceptions()
    assert error.type == "InvalidArgumentError"
    assert error.message == (
        "Table 'item/embeddings' (replicated) was looked up with id 1005 "
        "on worker 2; valid ids are [0, 1000)."
    )
    assert error.frame == "/home/me/train.py:27 in <module>: model.fit(x, y)"
    assert not error.is_consequence


def test_root_cause_prefers_a_cause_to_an_earlier_consequence():
    readers = {}
    for rank, message in (
        ("0", "RuntimeError: collectives were aborted by an earlier failure"),
        ("1", "ValueError: bad input"),
    ):
        readers[rank] = TracebackReader(lambda rank=rank: rank, ())
        for line in ("Traceback (most recent call last):", message):
            readers[rank].read(line)
    errors = [e for r in readers.values() for e in r.exceptions()]
    assert root_cause_lines(errors) == [
        "the failure started on rank 1: ValueError: bad input",
        "rank 0 failed as a consequence of rank 1's failure: RuntimeError: "
        "collectives were aborted by an earlier failure",
    ]
