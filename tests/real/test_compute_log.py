"""record_compute: FLOPs of products, new tensor memory, and communication seen at the dispatcher."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as functional
import torch.nn.functional as F

from course_lib.real import record_compute, run_ranks


def test_products_are_counted_whatever_python_path_makes_them():
    a, b = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 4, 6)
    with record_compute(rank=7) as work:
        a @ b                                    # bmm
        torch.einsum("bhik,bhkj->bhij", a, b)    # bmm too
        a[0, 0] @ b[0, 0]                        # mm
        torch.addmm(torch.zeros(5, 6), a[0, 0], b[0, 0])
        a[0, 0, 0] @ b[0, 0, :, 0]               # dot
        a.exp().sum()                            # elementwise: not a product
    per_product = 2 * 5 * 4 * 6
    assert work.rank == 7
    assert [e.op for e in work.events] == ["bmm", "bmm", "mm", "addmm", "dot"]
    assert work.flops() == 2 * 6 * per_product + 2 * per_product + 2 * 4
    assert all(e.end >= e.start for e in work.events)
    assert work.spans("x")[0][0] == "x" and len(work.spans()) == 5


def test_a_product_written_as_a_broadcast_multiply_and_a_sum_counts_as_arithmetic():
    a, b = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4)
    with record_compute() as broadcast:
        (a[..., :, None, :] * b[..., None, :, :]).sum(-1)
    with record_compute() as product:
        a @ b.transpose(-1, -2)
    assert broadcast.flops() == 0 and broadcast.arithmetic() == product.arithmetic() == 2 * 2 * 3 * 5 * 6 * 4
    with record_compute() as copies:
        a.clone().to(torch.float64)
        torch.cat([a, a])
    assert copies.elementwise == 0


def test_attention_kernel_counts_scores_and_weighted_sum():
    q, k, v = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 3)
    with record_compute() as work:
        F.scaled_dot_product_attention(q, k, v)
    assert work.flops() == 2 * 2 * 8 * 6 * 4 + 2 * 2 * 8 * 6 * 3


def test_memory_counts_new_tensors_until_freed_not_inputs_or_views():
    x = torch.randn(1000)                        # 4000 bytes made outside: not counted
    with record_compute() as work:
        x.view(10, 100).transpose(0, 1)          # views of an input: nothing new
        y = x * 2                                # 4000 new, kept
        for _ in range(3):
            z = torch.empty(2000)                # 8000 at a time, each freed when z is replaced
        del z
    assert work.peak_bytes == 4000 + 8000 + 8000   # the next empty is made before the old one goes
    assert work.live_bytes == 4000 and y.numel() == 1000


def _communication(rank, world_size):
    tensor, inbox = torch.ones(4), torch.empty(4)
    with record_compute() as work:
        sending = dist.isend(tensor, (rank + 1) % world_size)
        dist.irecv(inbox, (rank - 1) % world_size).wait()
        sending.wait()
        functional.all_gather_single(tensor, 0, list(range(world_size))).wait()
    return work.communication, work.collectives()


def test_communication_below_torch_distributed_is_seen():
    communication, collectives = run_ranks(_communication, 2)[0]
    assert communication[:2] == ["c10d.send", "c10d.recv_"]
    assert collectives == ["_c10d_functional.all_gather_into_tensor"]
