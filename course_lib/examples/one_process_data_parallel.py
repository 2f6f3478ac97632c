"""The old single-process design of nn.DataParallel, imitated on the CPU with one thread per replica.

Every step copies the model to each replica, scatters the batch, runs the replicas in threads of ONE
Python process (sharing its GIL) and sums their gradients back onto the original model (replica 0).
"""

from __future__ import annotations

import copy
import os
import threading
import time

import torch
from torch import nn


def _work(replica, inputs, targets, out: dict, index: int) -> None:
    loss = nn.functional.mse_loss(replica(inputs), targets)
    loss.backward()
    # The thread's name, not get_ident(): an ident is reused once a thread has finished.
    out[index] = (os.getpid(), threading.current_thread().name)


def one_process_data_parallel_step(model: nn.Module, inputs, targets, replicas: int, lr: float) -> dict:
    """One SGD step of ``model`` the nn.DataParallel way; returns what happened, for the lesson's table."""
    start = time.perf_counter()
    copies = [copy.deepcopy(model) for _ in range(replicas)]              # replicate, every step
    copied = sum(p.numel() * p.element_size() for c in copies for p in c.parameters())
    where: dict = {}
    threads = [threading.Thread(target=_work, args=(c, x, y, where, i))   # scatter the batch
               for i, (c, x, y) in enumerate(zip(copies, inputs.chunk(replicas), targets.chunk(replicas),
                                                 strict=True))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with torch.no_grad():                                                 # reduce onto replica 0
        for original, *replicated in zip(model.parameters(), *(c.parameters() for c in copies), strict=True):
            original -= lr * sum(r.grad for r in replicated) / replicas
    return {"seconds": time.perf_counter() - start, "bytes_copied": copied,
            "pids": sorted({pid for pid, _ in where.values()}),
            "threads": len({thread for _, thread in where.values()})}
