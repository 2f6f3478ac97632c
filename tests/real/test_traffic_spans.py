"""record_traffic's spans and future end times, and record_ddp_buckets, on real gloo ranks."""

from __future__ import annotations

import time

import torch
import torch._dynamo  # noqa: F401 - DDP imports it; once in the parent instead of in every rank
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from course_lib.real import (
    TrafficLog,
    make_wide_mlp,
    record_ddp_buckets,
    record_traffic,
    run_ranks,
    traffic_timeline,
)


def test_spans_become_compute_events_on_the_rank_lane():
    log = TrafficLog(rank=1)
    with log.span("backward"):
        time.sleep(0.002)
    [(label, start, end)] = log.spans
    assert label == "backward" and end - start >= 0.002
    timeline = traffic_timeline([TrafficLog(rank=0), log])
    [event] = list(timeline.events())
    assert (event.lane, event.kind, event.label) == (1, "compute", "backward")
    assert abs(event.end - event.start - (end - start)) < 1e-9


def _future_ends_when_the_all_reduce_completes(rank, world_size):
    tensor = torch.ones(1000)
    with record_traffic() as log:
        future = dist.all_reduce(tensor, async_op=True).get_future()
        future.wait()
        finished = time.perf_counter()
    [event] = log.events
    return event.op, event.start <= event.end <= finished, float(tensor[0])


def test_a_futures_completion_closes_its_event():
    assert run_ranks(_future_ends_when_the_all_reduce_completes, 2) == [("all_reduce", True, 2.0)] * 2


def _torch_ddp_buckets(rank, world_size):
    model = record_ddp_buckets(DistributedDataParallel(make_wide_mlp((64, 256, 64)), bucket_cap_mb=0.05))
    inputs = torch.full((4, 64), float(rank + 1))
    with record_traffic() as log:
        with log.span("backward"):
            nn.functional.mse_loss(model(inputs), torch.zeros(4, 64)).backward()
    return [(e.op, e.nbytes) for e in log.events], [p.grad.clone() for p in model.parameters()]


def test_torch_ddp_buckets_are_recorded_and_still_averaged():
    (events, grads), (other_events, other_grads) = run_ranks(_torch_ddp_buckets, 2, timeout=60)
    model = make_wide_mlp((64, 256, 64))
    for rank in range(2):
        nn.functional.mse_loss(model(torch.full((4, 64), float(rank + 1))), torch.zeros(4, 64)).backward()
    expected = [p.grad / 2 for p in model.parameters()]
    assert events and {op for op, _ in events} == {"all_reduce"}
    assert sum(nbytes for _, nbytes in events) == 4 * sum(p.numel() for p in model.parameters())
    assert events == other_events
    for got, other, want in zip(grads, other_grads, expected, strict=True):
        assert torch.allclose(got, want, atol=1e-5) and torch.equal(got, other)


def test_a_timeline_since_a_moment_keeps_what_started_then_or_later():
    log = TrafficLog(rank=0, spans=[("forward", 1.0, 2.0), ("forward", 5.0, 6.0), ("backward", 6.0, 8.0)])
    timeline = traffic_timeline([log], since=5.0)
    assert [(e.label, e.start, e.end) for e in timeline.events()] == [("forward", 0.0, 1.0),
                                                                       ("backward", 1.0, 3.0)]
