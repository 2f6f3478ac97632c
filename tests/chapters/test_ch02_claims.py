"""What chapter 02's prose says about sends, NCCL and a bucket's latency, asserted: gloo's blocking send
measured on real ranks, NCCL's non-blocking one read in the installed torch, the shares the cells print."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from course_lib import sim
from course_lib.dist import run_ranks

C10D = Path(dist.__file__).parent / "distributed_c10d.py"
RECEIVER_LATE_S = 0.3


def _send_waits_for_the_receiver(rank, world_size, nbytes):
    tensor = torch.zeros(max(1, nbytes // 4))
    if rank == 0:
        start = time.perf_counter()
        dist.send(tensor, dst=1)
        return time.perf_counter() - start
    time.sleep(RECEIVER_LATE_S)
    dist.recv(tensor, src=0)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("nbytes", [4, 1 << 20])
def test_on_gloo_a_send_returns_only_once_the_receiver_has_posted_its_receive(nbytes):
    waited = run_ranks(_send_waits_for_the_receiver, 2, nbytes, timeout=30)[0]
    assert waited >= 0.9 * RECEIVER_LATE_S


def test_dist_send_is_isend_then_wait_and_nccls_wait_blocks_the_stream_not_python():
    lines = C10D.read_text().splitlines()[2750:2753]           # the prose cites lines 2751-2753
    assert "work = isend(" in lines[0] and lines[-1].strip() == "work.wait()", lines
    assert "Letting the current stream block on the completion of the NCCL work" in dist.Work.wait.__doc__


@pytest.mark.parametrize("nodes", [1, 16, 128, 512])
def test_the_bucket_latency_shares_section_7_prints_lie_between_0_and_1(nodes):
    cluster = sim.make_cluster(nodes, 8)
    link = cluster.group_link(range(cluster.world_size))
    share = sim.latency_share("all_reduce", 25 * 2**20, cluster.world_size, link)
    bandwidth_term = 2 * (cluster.world_size - 1) / cluster.world_size * 25 * 2**20 / link.bandwidth
    ring = sim.collective_time("all_reduce", 25 * 2**20, cluster.world_size, link, "ring")
    assert 0 < share < 1 and share == pytest.approx(1 - bandwidth_term / ring)


def test_section_1s_table_all_to_all_and_broadcast_as_nccl_runs_them():
    # cell 16: all-to-all no faster than half of each GPU's buffer through its NIC; broadcast about S/B
    two = sim.make_cluster(2, 8)
    ranks, size = range(16), 64e6
    floor = size * 8 / 16 / two.preset.inter_node.bandwidth
    assert floor <= two.collective_time("all_to_all", size, ranks) < 1.05 * floor
    link = two.group_link(ranks)
    assert size / link.bandwidth < two.collective_time("broadcast", size, ranks) < 1.5 * size / link.bandwidth
