"""Host bookkeeping of elastic jobs: slots per host to task starts and
retirements, and the addresses of the cluster."""

import pytest

from keras_hybrid.launch.elastic.host_slots import HostPlan
from keras_hybrid.launch.elastic.host_slots import hosts_of
from keras_hybrid.launch.elastic.host_slots import merge_slots
from keras_hybrid.launch.elastic.host_slots import plan_hosts
from keras_hybrid.launch.elastic.host_slots import port_needs
from keras_hybrid.launch.elastic.host_slots import remote_hosts
from keras_hybrid.launch.elastic.host_slots import task_addresses
from keras_hybrid.launch.elastic.host_slots import task_ports


def test_first_answer_places_tasks_host_by_host():
    plan = plan_hosts({}, [("hostA", 2), ("hostB", 1)], 0, 8)
    assert plan == HostPlan([], [(0, "hostA"), (1, "hostA"), (2, "hostB")])


def test_first_answer_stops_at_max_np():
    plan = plan_hosts({}, [("hostA", 3), ("hostB", 3)], 0, 4)
    assert [t for t, _ in plan.start] == [0, 1, 2, 3]
    assert [h for _, h in plan.start] == ["hostA"] * 3 + ["hostB"]


def test_a_new_host_gets_the_next_free_tasks():
    placed = {0: "hostA", 1: "hostA"}
    plan = plan_hosts(placed, [("hostA", 2), ("hostB", 2)], 2, 8)
    assert plan == HostPlan([], [(2, "hostB"), (3, "hostB")])


def test_tasks_still_running_are_not_free():
    placed = {0: "hostA", 1: "hostA"}
    plan = plan_hosts(placed, [("hostA", 2), ("hostB", 2)], 2, 8, busy={2})
    assert plan.start == [(3, "hostB"), (4, "hostB")]


def test_fewer_slots_on_a_host_retire_its_highest_tasks():
    placed = {0: "hostA", 1: "hostA", 2: "hostB", 3: "hostB"}
    plan = plan_hosts(placed, [("hostA", 2), ("hostB", 1)], 2, 8)
    assert plan == HostPlan([3], [])


def test_a_host_that_disappears_retires_all_its_tasks_not_task_0():
    placed = {0: "hostA", 1: "hostA", 2: "hostB", 3: "hostB"}
    assert plan_hosts(placed, [("hostA", 2)], 2, 8).retire == [2, 3]
    # Task 0 leads TF's collectives: it stays, its host's peer leaves.
    assert plan_hosts(placed, [("hostB", 2)], 2, 8).retire == [1]


def test_retirements_keep_min_np_tasks():
    placed = {0: "hostA", 1: "hostA", 2: "hostB", 3: "hostB"}
    plan = plan_hosts(placed, [("hostA", 1)], 3, 8)
    assert plan.retire == [3]


def test_a_retirement_comes_before_any_start():
    placed = {0: "hostA", 1: "hostA", 2: "hostB"}
    plan = plan_hosts(placed, [("hostA", 2), ("hostC", 2)], 2, 8)
    assert plan == HostPlan([2], [])


def test_nothing_changes_when_the_slots_are_used():
    placed = {0: "hostA", 1: "hostB"}
    assert plan_hosts(placed, [("hostA", 1), ("hostB", 1)], 2, 8) == HostPlan(
        [], []
    )


def test_local_names_are_one_host():
    assert merge_slots([("localhost", 2), ("127.0.0.1", 1)]) == {"localhost": 3}
    assert remote_hosts([("localhost", 2), ("hostB", 1)]) == ["hostB"]
    placed = {0: "localhost", 1: "localhost"}
    assert plan_hosts(placed, [("127.0.0.1", 3)], 2, 4).start == [
        (2, "localhost")
    ]


def test_addresses_are_on_each_tasks_host():
    placed = {0: "hostA", 2: "hostB"}
    cluster = task_addresses(placed, [10, 11, 12])
    assert cluster == ["hostA:10", "127.0.0.1:11", "hostB:12"]
    assert hosts_of(cluster) == ["hostA", "127.0.0.1", "hostB"]


def test_local_tasks_use_the_address_other_hosts_reach():
    placed = {0: "localhost", 1: "hostB"}
    assert task_addresses(placed, [5, 6]) == ["127.0.0.1:5", "hostB:6"]
    assert task_addresses(placed, [5, 6], "10.0.0.7") == [
        "10.0.0.7:5",
        "hostB:6",
    ]


def test_other_hosts_are_named_as_resolved():
    placed = {0: "localhost", 1: "hostB"}
    names = {"hostB": "10.0.0.9"}
    assert task_addresses(placed, [5, 6], "10.0.0.7", names.get) == [
        "10.0.0.7:5",
        "10.0.0.9:6",
    ]


def test_each_host_gives_the_ports_of_its_tasks():
    # Tasks 1 and 3 on hostB, task 0 here, task 2 not placed: this
    # machine gives its loopback placeholder a port too.
    placed = {0: "localhost", 1: "hostB", 3: "hostB"}
    assert port_needs(placed, 4) == {"localhost": 2, "hostB": 2}
    ports = {"localhost": [40001, 40002], "hostB": [40001, 50007]}
    assert task_ports(placed, 4, ports) == [40001, 40001, 40002, 50007]
    cluster = task_addresses(placed, task_ports(placed, 4, ports))
    assert cluster == [
        "127.0.0.1:40001",
        "hostB:40001",  # another host: the same number is no clash
        "127.0.0.1:40002",
        "hostB:50007",
    ]


def test_a_host_without_tasks_needs_no_ports():
    assert port_needs({}, 2) == {"localhost": 2}
    placed = {0: "hostA", 1: "hostA"}
    assert port_needs(placed, 2) == {"localhost": 0, "hostA": 2}
    assert task_ports(placed, 2, {"localhost": [], "hostA": [7, 8]}) == [7, 8]


def test_a_host_must_give_distinct_ports_enough_for_its_tasks():
    placed = {0: "localhost", 1: "hostB", 2: "hostB"}
    with pytest.raises(ValueError, match=r"Host hostB must give 2 distinct"):
        task_ports(placed, 3, {"localhost": [1], "hostB": [9, 9]})
    with pytest.raises(ValueError, match=r"Received: \[9\]"):
        task_ports(placed, 3, {"localhost": [1], "hostB": [9]})
    with pytest.raises(ValueError, match=r"Host hostB"):
        task_ports(placed, 3, {"localhost": [1]})
