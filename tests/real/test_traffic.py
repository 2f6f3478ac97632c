"""record_traffic inside real ranks: what is recorded, what is forbidden, and the Timeline converter."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from course_lib.real import (
    ForbiddenCallError,
    RankFailure,
    TrafficEvent,
    TrafficLog,
    record_traffic,
    run_ranks,
    traffic_timeline,
)
from course_lib.real.record.traffic_log import _forbidden_messages


def mixed_traffic(rank, world_size):
    peer, original = 1 - rank, dist.all_reduce
    with record_traffic() as log:
        assert dist.all_reduce is not original and not hasattr(dist.all_reduce, "__wrapped__")
        tensor = torch.ones(256)  # 1 KiB
        dist.all_reduce(tensor)
        if rank == 0:
            dist.send(tensor, peer)
            dist.isend(tensor[:128], peer).wait()
        else:
            dist.recv(tensor, peer)
            dist.recv(tensor[:128])  # from any source: the sender is recorded as the peer
        gathered = [torch.zeros(256) for _ in range(world_size)]
        dist.all_gather(gathered, tensor)
        operations = [dist.P2POp(dist.isend, tensor, peer), dist.P2POp(dist.irecv, torch.zeros(256), peer)]
        for work in dist.batch_isend_irecv(operations):
            work.wait()
    assert dist.all_reduce is original  # restored on leaving
    return log


def test_every_call_is_recorded_with_peer_bytes_and_times():
    logs = run_ranks(mixed_traffic, 2)
    assert [log.rank for log in logs] == [0, 1]
    rows = [[(e.op, e.peer, e.nbytes) for e in log.events] for log in logs]
    assert rows[0] == [("all_reduce", None, 1024), ("send", 1, 1024), ("isend", 1, 512),
                       ("all_gather", None, 2048), ("isend", 1, 1024), ("irecv", 1, 1024)]
    assert rows[1] == [("all_reduce", None, 1024), ("recv", 0, 1024), ("recv", 0, 512),
                       ("all_gather", None, 2048), ("isend", 0, 1024), ("irecv", 0, 1024)]
    for log in logs:
        assert all(e.end >= e.start for e in log.events)
        assert all(a.start <= b.start for a, b in zip(log.events, log.events[1:], strict=False))
    assert logs[0].bytes_sent() == 1024 + 512 + 1024 and logs[1].total_bytes("recv") == 1536


def single_tensor_collectives(rank, world_size):
    with record_traffic() as log:
        dist.all_gather_single(torch.zeros(4 * world_size), torch.ones(4))
        dist.reduce_scatter_single(torch.zeros(4), torch.ones(4 * world_size))
    return [(e.op, e.nbytes) for e in log.events]


def test_single_tensor_collectives_count_the_whole_buffer_like_nccl_tests():
    """all_gather_single counts its output, reduce_scatter_single its input: both N x the shard."""
    for events in run_ranks(single_tensor_collectives, 2):
        assert events == [("all_gather_into_tensor", 32), ("reduce_scatter_tensor", 32)]


def forbidden_all_reduce(rank, world_size):
    with record_traffic(forbid="collectives"):
        dist.all_reduce(torch.ones(4))


def test_a_forbidden_call_fails_with_the_exercise_message():
    with pytest.raises(RankFailure) as caught:
        run_ranks(forbidden_all_reduce, 2)
    assert caught.value.exc_type == "ForbiddenCallError"
    assert ("this exercise must be built from send/recv/isend/irecv: dist.all_reduce is not allowed"
            in str(caught.value))


def bypass_through_the_process_group(rank, world_size):
    with record_traffic(forbid=("all_reduce",), reason="build it from send and recv") as log:
        dist.broadcast(torch.ones(4), 0)
        try:
            dist.group.WORLD.allreduce([torch.ones(4)]).wait()
        except ForbiddenCallError as error:
            message = str(error)
    dist.group.WORLD.allreduce([torch.ones(4)]).wait()  # restored after the block
    return message, log.ops()


def test_calling_the_process_group_directly_does_not_escape_a_forbid():
    message, ops = run_ranks(bypass_through_the_process_group, 2)[0]
    assert message == "build it from send and recv: dist.all_reduce is not allowed"
    assert ops == ["broadcast"]


def test_bad_forbid_names_and_use_outside_a_rank_are_refused():
    with pytest.raises(ValueError, match="cannot forbid 'allreduce'"):
        _forbidden_messages(("allreduce",), None)
    with pytest.raises(RuntimeError, match="inside a rank"):
        with record_traffic():
            pass


def test_the_records_become_a_simulator_timeline():
    logs = [TrafficLog(0, [TrafficEvent(0, "send", 1, 8, 10.0, 10.5)]),
            TrafficLog(1, [TrafficEvent(1, "recv", 0, 8, 10.1, 10.5), TrafficEvent(1, "all_reduce", None, 8,
                                                                                   11.0, 12.0)])]
    timeline = traffic_timeline(logs)
    assert timeline.lane_names == ["rank 0", "rank 1"]
    events = list(timeline.events())
    assert [(e.lane, e.start, e.end, e.kind, e.label) for e in events] == [
        (0, 0.0, 0.5, "comm", "send->1"), (1, pytest.approx(0.1), 0.5, "comm", "recv<-0"),
        (1, 1.0, 2.0, "comm", "all_reduce")]
    assert timeline.makespan == 2.0
    with pytest.raises(TypeError, match="TrafficLog"):
        traffic_timeline([3])


def uneven_all_to_all(rank, world_size):
    sends = [2 * rank + peer + 1 for peer in range(world_size)]         # rows to each rank: uneven both ways
    receives = [2 * peer + rank + 1 for peer in range(world_size)]
    with record_traffic() as log:
        received = torch.empty(sum(receives), 3)
        dist.all_to_all_single(received, torch.ones(sum(sends), 3), receives, sends)
        dist.all_to_all_single(torch.empty(2 * world_size), torch.ones(2 * world_size))   # equal splits
        group = dist.new_group(list(range(world_size)))
        group.alltoall_base(torch.empty(world_size), torch.ones(world_size), [], [],
                            dist.AllToAllOptions()).wait()
    return [(e.op, e.nbytes, e.sent_to) for e in log.events]


def test_an_all_to_all_records_the_bytes_sent_to_each_rank():
    for rank, events in enumerate(run_ranks(uneven_all_to_all, 3)):
        rows = [2 * rank + peer + 1 for peer in range(3)]
        received = sum(2 * peer + rank + 1 for peer in range(3))
        assert events == [("all_to_all_single", received * 12, tuple(12 * n for n in rows)),
                          ("all_to_all_single", 24, (8, 8, 8)),
                          ("all_to_all_single", 12, (4, 4, 4))]
