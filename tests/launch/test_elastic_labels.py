"""An elastic worker's output and the launcher's messages name its rank
(its index among the sorted members), not its task."""

import sys

from keras_hybrid.launch.elastic.processes import ElasticProcesses


def test_label_is_the_rank_of_a_member_and_the_task_of_a_joiner():
    members = [0, 2, 3]

    def rank_of(task):
        return members.index(task) if task in members else None

    procs = ElasticProcesses([sys.executable, "-c", "pass"], 1.0, rank_of)
    assert [procs.label(t) for t in (0, 2, 3)] == ["0", "1", "2"]
    assert procs.label(1) == "task 1"
    members.remove(2)  # a lost member: the others' ranks follow
    assert procs.label(3) == "1"


def test_output_prefix_follows_the_rank(tmp_path, capfd):
    members = [0, 5]

    def rank_of(task):
        return members.index(task) if task in members else None

    procs = ElasticProcesses(
        [sys.executable, "-c", "print('hi')"], 1.0, rank_of
    )
    procs.start(5, "localhost", {}).proc.wait(timeout=30)
    procs.stop_all(15)
    assert "[1] hi" in capfd.readouterr().out
