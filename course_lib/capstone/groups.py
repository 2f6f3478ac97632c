"""``torch.distributed`` as one group of a device mesh sees it, for code written for the default group.

The chapters' exercises call ``dist.get_rank()``, ``dist.all_reduce(t)`` and ``dist.send(t, dst=r)`` on the
whole world; bound to a GroupDist, the same code runs on one mesh dimension, and its traffic is logged.
"""

from __future__ import annotations

import time

import torch.distributed as dist


class GroupDist:
    """Stands in for the ``torch.distributed`` module: group ranks in, global ranks out, one group.

    ``log`` collects (dimension, op, bytes, start, end) of every call, so traffic can be drawn by dimension.
    Anything not defined here (ReduceOp, is_initialized, ...) is the real module's.
    """

    def __init__(self, dimension: str, ranks, group, log: list):
        self.dimension, self.ranks, self.group, self.log = dimension, list(ranks), group, log

    def __getattr__(self, name):
        return getattr(dist, name)

    def get_rank(self, group=None) -> int:
        return self.ranks.index(dist.get_rank())

    def get_world_size(self, group=None) -> int:
        return len(self.ranks)

    def _record(self, op, tensor, start, work=None):
        entry = [self.dimension, op, tensor.numel() * tensor.element_size(), start, time.perf_counter()]
        self.log.append(entry)
        if work is None:
            return None
        return _TimedWork(work, entry)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        start = time.perf_counter()
        work = dist.all_reduce(tensor, op=op, group=self.group, async_op=async_op)
        return self._record("all_reduce", tensor, start, work if async_op else None)

    def broadcast(self, tensor, src, group=None, async_op=False):
        start = time.perf_counter()
        work = dist.broadcast(tensor, src=self.ranks[src], group=self.group, async_op=async_op)
        return self._record("broadcast", tensor, start, work if async_op else None)

    def all_gather_single(self, output, tensor, group=None, async_op=False):
        start = time.perf_counter()
        work = dist.all_gather_single(output, tensor, group=self.group, async_op=async_op)
        return self._record("all_gather", output, start, work if async_op else None)

    def reduce_scatter_single(self, output, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        start = time.perf_counter()
        work = dist.reduce_scatter_single(output, tensor, op=op, group=self.group, async_op=async_op)
        return self._record("reduce_scatter", tensor, start, work if async_op else None)

    def barrier(self, group=None, async_op=False):
        return dist.barrier(group=self.group, async_op=async_op)

    def send(self, tensor, dst, group=None, tag=0):
        start = time.perf_counter()
        dist.send(tensor, dst=self.ranks[dst], group=self.group, tag=tag)
        self._record("send", tensor, start)

    def recv(self, tensor, src=None, group=None, tag=0):
        start = time.perf_counter()
        sender = dist.recv(tensor, src=None if src is None else self.ranks[src], group=self.group, tag=tag)
        self._record("recv", tensor, start)
        return self.ranks.index(sender) if sender in self.ranks else sender

    def isend(self, tensor, dst, group=None, tag=0):
        start = time.perf_counter()
        return self._record("isend", tensor, start, dist.isend(tensor, dst=self.ranks[dst], group=self.group,
                                                                tag=tag))

    def irecv(self, tensor, src=None, group=None, tag=0):
        start = time.perf_counter()
        work = dist.irecv(tensor, src=None if src is None else self.ranks[src], group=self.group, tag=tag)
        return self._record("irecv", tensor, start, work)


class _TimedWork:
    """A non-blocking call's handle whose wait() also closes its log entry."""

    def __init__(self, work, entry):
        self._work, self._entry = work, entry

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        self._entry[4] = time.perf_counter()
        return result

    def __getattr__(self, name):
        return getattr(self._work, name)
