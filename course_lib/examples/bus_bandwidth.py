"""Measures all_reduce bus bandwidth over message sizes, as nccl-tests reports it (for the Slurm job).

algbw = bytes / time; busbw = algbw * 2(n-1)/n, the rate each link carries in a ring all-reduce, which
is comparable with the hardware's link bandwidth. Times are medians over repetitions, slowest rank's.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from course_lib.examples._common import finish, positive_int, significant
from course_lib.real import current_device
from course_lib.sim import bus_factor

CPU_MAX_BYTES, GPU_MAX_BYTES = 4 << 20, 256 << 20
MIN_BYTES, REPETITIONS = 4 << 10, 5


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_all_reduce(nbytes: int, repetitions: int, device: torch.device) -> float:
    """Median seconds of one all_reduce of ``nbytes``, taking the slowest rank for each repetition."""
    tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    dist.all_reduce(tensor)  # warm-up: connections, buffers
    times = []
    for _ in range(repetitions):
        _synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        _synchronize(device)
        elapsed = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(elapsed.item())
    return statistics.median(times)


def message_sizes(max_bytes: int) -> list[int]:
    sizes, size = [], MIN_BYTES
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    return sizes


def main(rank: int, world_size: int, max_bytes=None, repetitions=REPETITIONS) -> dict:
    device = current_device()
    default_max = GPU_MAX_BYTES if device.type == "cuda" else CPU_MAX_BYTES
    max_bytes = positive_int(max_bytes, "max_bytes") if max_bytes is not None else default_max
    repetitions = positive_int(repetitions, "repetitions")
    factor = bus_factor("all_reduce", world_size)
    rows = []
    for nbytes in message_sizes(max_bytes):
        seconds = time_all_reduce(nbytes, repetitions, device)
        algbw = nbytes / seconds
        rows.append({"bytes": nbytes, "seconds": significant(seconds, 4),
                     "algbw_GBps": significant(algbw / 1e9, 4),
                     "busbw_GBps": significant(algbw * factor / 1e9, 4)})
    return finish("bus_bandwidth", len(rows), None, op="all_reduce", repetitions=repetitions, results=rows,
                  peak_busbw_GBps=max(row["busbw_GBps"] for row in rows),
                  note="timings vary run to run; final_loss is null (nothing is trained)")
