"""The event-level ring agrees with the closed form, and its transfers really compute a sum."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim import (
    Link,
    collective_time,
    collective_timeline,
    parameter_server_timeline,
    ring_timeline,
    tree_timeline,
)

LINK = Link(2e-5, 5e9)


@settings(database=None, max_examples=40, deadline=None)
@given(n=st.integers(1, 32), nbytes=st.floats(0, 1e9), op=st.sampled_from(["all_reduce", "reduce_scatter",
                                                                           "all_gather"]))
def test_event_level_ring_equals_closed_form(n, nbytes, op):
    t = ring_timeline(op, n, nbytes, LINK)
    assert t.makespan == pytest.approx(collective_time(op, nbytes, n, LINK, "ring"), rel=1e-9, abs=1e-15)
    steps = (2 if op == "all_reduce" else 1) * (n - 1)
    assert t.num_events == n * steps


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_replaying_the_transfers_sums_every_chunk(n):
    values = [[float(10 * r + c) for c in range(n)] for r in range(n)]
    expected = [sum(values[r][c] for r in range(n)) for c in range(n)]
    events = sorted((e.meta for e in ring_timeline("all_reduce", n, 1.0, LINK).events()),
                    key=lambda m: m["step"])
    for step in range(2 * (n - 1)):
        snapshot = [row[:] for row in values]
        for m in (m for m in events if m["step"] == step):
            incoming = snapshot[m["src"]][m["chunk"]]
            if m["phase"] == "reduce-scatter":
                values[m["dst"]][m["chunk"]] += incoming
            else:
                values[m["dst"]][m["chunk"]] = incoming
    assert values == [expected] * n


def test_reduce_scatter_leaves_chunk_r_complete_on_rank_r():
    n = 5
    last = [e.meta for e in ring_timeline("reduce_scatter", n, 1.0, LINK).events() if e.meta["step"] == n - 2]
    assert sorted((m["dst"], m["chunk"]) for m in last) == [(r, r) for r in range(n)]


@pytest.mark.parametrize("op", ["all_reduce", "reduce", "broadcast"])
def test_parameter_server_timeline_equals_closed_form(op):
    t = parameter_server_timeline(op, 6, 1e8, LINK)
    assert t.makespan == pytest.approx(collective_time(op, 1e8, 6, LINK, "parameter_server"))


def test_bad_requests():
    with pytest.raises(ValueError, match="ring_timeline draws"):
        ring_timeline("broadcast", 4, 1.0, LINK)
    with pytest.raises(ValueError, match="nbytes"):
        ring_timeline("all_reduce", 4, -1.0, LINK)
    with pytest.raises(ValueError, match="server"):
        parameter_server_timeline("reduce", 4, 1.0, LINK, server=9)


@settings(database=None, max_examples=30, deadline=None)
@given(n=st.integers(1, 40), op=st.sampled_from(["all_reduce", "reduce", "broadcast"]))
def test_event_level_tree_equals_closed_form(n, op):
    t = tree_timeline(op, n, 1e6, LINK)
    assert t.makespan == pytest.approx(collective_time(op, 1e6, n, LINK, "tree"), abs=1e-15)
    per_phase = n - 1
    assert t.num_events == per_phase * (2 if op == "all_reduce" else 1)


def test_tree_broadcast_reaches_every_rank_once():
    reached = {3} | {e.meta["dst"] for e in tree_timeline("broadcast", 11, 1.0, LINK, root=3).events()}
    assert reached == set(range(11))
    assert collective_timeline("all_reduce", 4, 1.0, LINK, "tree").num_events == 6
    with pytest.raises(ValueError, match="algorithms"):
        collective_timeline("all_reduce", 4, 1.0, LINK, "recursive_doubling")
