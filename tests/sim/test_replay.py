"""Recorded traffic read as a step pattern, checked to be a ring, scaled, and replayed on a cluster."""

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim import Link, collective_time, make_cluster, ring_timeline
from course_lib.sim.collectives.replay import RingPattern, replay_pattern, traffic_pattern

ONE_LINK = Link(2e-5, 5e9)


@dataclass
class Event:  # what course_lib.real.TrafficEvent carries that the pattern reads
    op: str
    peer: int | None
    nbytes: int


@dataclass
class Log:
    rank: int
    events: list = field(default_factory=list)


def ring_logs(n, buffer_bytes, right=lambda r, n: (r + 1) % n, size=None, extra=()):
    """The logs a ring all-reduce records: 2(N-1) times, isend to the right and irecv from the left."""
    logs = []
    for rank in range(n):
        log = Log(rank)
        for _ in range(2 * (n - 1)):
            log.events.append(Event("irecv", (rank - 1) % n, buffer_bytes // n))
            log.events.append(Event("isend", right(rank, n), size or buffer_bytes // n))
        log.events += [Event(op, None, buffer_bytes) for op in extra]
        logs.append(log)
    return logs


def single_link_cluster(n):
    return make_cluster(nodes=1, gpus_per_node=n, intra_node=ONE_LINK, inter_node=ONE_LINK)


def test_a_recorded_ring_reads_as_2n_minus_2_steps_to_the_right():
    pattern = traffic_pattern(ring_logs(4, 4096), 4096)
    assert pattern.num_steps == 6
    assert pattern.step(0) == [(0, 1, 1024), (1, 2, 1024), (2, 3, 1024), (3, 0, 1024)]
    assert pattern.ring_problems() == []
    assert "6 = 2(N-1) steps" in pattern.check_ring()
    assert "step 5: 0->1 1024 B" in pattern.describe()


@pytest.mark.parametrize("logs, problem", [
    (ring_logs(4, 4096, right=lambda r, n: (r - 1) % n), "only to the right neighbour"),
    (ring_logs(4, 4096, size=4096), "a ring sends S/N = 1024"),
    (ring_logs(4, 4096, extra=("all_reduce",)), "called all_reduce"),
    (ring_logs(4, 4096)[:3] + [Log(3)], "sent 0 messages"),
])
def test_what_is_not_a_ring_is_named_and_never_scaled(logs, problem):
    pattern = traffic_pattern(logs, 4096)
    assert any(problem in p for p in pattern.ring_problems()), pattern.ring_problems()
    with pytest.raises(ValueError, match="not a ring"):
        pattern.scaled_ring(1024)


def test_uneven_chunks_pass_only_within_one_element():
    logs = ring_logs(3, 40)  # 10 float32 on 3 ranks: chunks of 4, 3 and 3 elements, S/N = 13.3 bytes
    for log in logs:
        for event in log.events:
            event.nbytes = 16 if event.nbytes == 13 and log.rank == 0 else 12
    assert traffic_pattern(logs, 40).ring_problems()
    assert traffic_pattern(logs, 40, element_bytes=4).ring_problems() == []
    logs[1].events[1].nbytes = 8  # a chunk two elements short
    assert traffic_pattern(logs, 40, element_bytes=4).ring_problems()


def test_two_ranks_cannot_show_a_ring_and_logs_must_come_in_rank_order():
    with pytest.raises(ValueError, match="3 or more"):
        traffic_pattern(ring_logs(2, 64), 64).scaled_ring(8)
    with pytest.raises(ValueError, match="rank order"):
        traffic_pattern(list(reversed(ring_logs(3, 48))), 48)


def test_the_scaled_ring_has_2n_minus_2_steps_of_s_over_n_to_the_right():
    big = traffic_pattern(ring_logs(4, 4096), 4096).scaled_ring(1024)
    assert big.num_steps == 2 * 1023
    assert big.step(0) == big.step(2045)
    assert big.step(7)[1023] == (1023, 0, 4)
    with pytest.raises(IndexError):
        big.step(2046)


@settings(database=None, max_examples=30, deadline=None)
@given(n=st.integers(1, 24), nbytes=st.floats(0, 1e9))
def test_a_replayed_ring_on_one_link_costs_the_closed_form(n, nbytes):
    replay = replay_pattern(RingPattern(n, 1.0), single_link_cluster(n), nbytes)
    ring = collective_time("all_reduce", nbytes, n, ONE_LINK, "ring")
    assert replay.makespan == pytest.approx(ring, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_replayed_sends_match_the_event_level_ring(n):
    replay = replay_pattern(RingPattern(n, 1e6), single_link_cluster(n))
    for rank in range(n):
        ours = [(e.start, e.end) for e in replay.timeline.events(rank) if e.label.startswith("send")]
        theirs = [(e.start, e.end) for e in ring_timeline("all_reduce", n, 1e6, ONE_LINK).events(rank)]
        assert [t for span in ours for t in span] == pytest.approx([t for span in theirs for t in span])


def test_the_recorded_pattern_and_its_scaling_to_the_same_size_replay_alike():
    cluster = make_cluster(nodes=2, gpus_per_node=2, preset="h100")
    recorded = traffic_pattern(ring_logs(4, 4096), 4096)
    as_recorded = replay_pattern(recorded, cluster, 1e8)
    as_scaled = replay_pattern(recorded.scaled_ring(4), cluster, 1e8)
    assert as_recorded.finish == pytest.approx(as_scaled.finish)


@pytest.mark.parametrize("nodes", [2, 16, 128])
def test_across_nodes_the_ring_runs_at_the_inter_node_link_and_fast_ranks_wait(nodes):
    cluster = make_cluster(nodes=nodes, gpus_per_node=8, preset="h100")
    n = cluster.world_size
    replay = replay_pattern(RingPattern(n, 1.0), cluster, 2e9, ranks=[0, 6, 7, 8])
    ring = collective_time("all_reduce", 2e9, n, cluster.preset.inter_node, "ring")
    assert replay.makespan == pytest.approx(ring)
    assert replay.timeline.lane_names == ["rank 0", "rank 6", "rank 7", "rank 8"]
    kinds = {lane: {e.kind for e in replay.timeline.events(lane)} for lane in range(4)}
    assert "idle" in kinds[0] and "idle" in kinds[1]      # NVLink senders wait for the slow hop
    assert "idle" not in kinds[2]                         # rank 7 -> 8 over InfiniBand: back to back
    sends = [e for e in replay.timeline.events(2) if e.label.startswith("send")]
    assert len(sends) == 2 * (n - 1) and all(e.meta["dst"] == 8 for e in sends)
    assert sends[0].end - sends[0].start == pytest.approx(cluster.preset.inter_node.transfer_time(2e9 / n))


def test_replay_refuses_a_cluster_of_another_size_unknown_ranks_and_bad_sizes():
    pattern = RingPattern(4, 1.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="buffer_bytes"):
            replay_pattern(pattern, single_link_cluster(4), buffer_bytes=bad)
        with pytest.raises(ValueError, match="buffer_bytes"):
            RingPattern(4, bad)
        with pytest.raises(ValueError, match="buffer_bytes"):
            traffic_pattern(ring_logs(3, 48), bad)
    with pytest.raises(ValueError, match="scaled_ring"):
        replay_pattern(pattern, make_cluster(nodes=1, gpus_per_node=8))
    with pytest.raises(ValueError, match="distinct ranks"):
        replay_pattern(pattern, single_link_cluster(4), ranks=[0, 4])


@pytest.mark.slow
def test_a_ring_recorded_on_real_ranks_is_recognised():
    from course_lib.real import run_ranks

    logs = run_ranks(_recorded_ring, 3)
    pattern = traffic_pattern(logs, 12 * 4)
    assert "a ring on 3 ranks" in pattern.check_ring()


def _recorded_ring(rank, world_size):
    import torch
    import torch.distributed as dist

    from course_lib.real import record_traffic

    tensor = torch.ones(12)
    chunks = torch.tensor_split(tensor, world_size)
    inbox = torch.empty_like(chunks[0])
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    with record_traffic() as log:
        for step in range(2 * (world_size - 1)):
            receiving = dist.irecv(inbox, src=left)
            sending = dist.isend(chunks[(rank - step) % world_size], dst=right)
            receiving.wait()
            sending.wait()
    return log
