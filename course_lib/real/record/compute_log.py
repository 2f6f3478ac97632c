"""Recording the work a rank's code does, below Python: every matrix product's FLOPs and time, the
elements its other arithmetic touched, the most tensor bytes it kept alive at once, and every
communication op that reached PyTorch's dispatcher.

``with record_compute() as work:`` sees each aten op the block runs (a TorchDispatchMode), whatever
Python path called it: ``@``, ``torch.einsum``, ``F.scaled_dot_product_attention``, a functional
collective that ``record_traffic`` cannot see.
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten
POINT_TO_POINT_OPS = ("send", "recv_", "recv_any_source_")   # c10d's names for send / recv
NOT_COLLECTIVES = POINT_TO_POINT_OPS + ("wait_tensor", "_wrap_tensor_autograd")   # bookkeeping, no bytes
_COMM_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd")


def _matmul_flops(a, b) -> int:
    """2 x (output elements) x (inner dimension) for a (..., m, k) @ (..., k, n) product."""
    return 2 * math.prod(a.shape[:-1]) * b.shape[-1] * a.shape[-1]


def _attention_flops(query, key, value, *_, **__) -> int:
    """Scores (L x S per head, E deep) and the weighted sum (L x S, Ev deep), the mask not exploited."""
    rows = math.prod(query.shape[:-1]) * key.shape[-2]
    return 2 * rows * query.shape[-1] + 2 * rows * value.shape[-1]


# aten op -> FLOPs from its arguments. Elementwise ops are not counted here: an attention's work is its
# products; they are counted apart (``_elementwise``), so that a product written as a broadcast multiply
# and a sum is still seen as work.
_FLOPS = {
    aten.mm.default: lambda a, b, *_: _matmul_flops(a, b),
    aten.bmm.default: lambda a, b, *_: _matmul_flops(a, b),
    aten.addmm.default: lambda c, a, b, *_, **__: _matmul_flops(a, b),
    aten.baddbmm.default: lambda c, a, b, *_, **__: _matmul_flops(a, b),
    aten.mv.default: lambda a, b, *_: 2 * a.numel(),
    aten.dot.default: lambda a, b, *_: 2 * a.numel(),
    aten._scaled_dot_product_flash_attention_for_cpu.default: _attention_flops,
}


_NOT_ARITHMETIC = frozenset({aten.clone.default, aten._to_copy.default, aten.copy_.default})
_ARITHMETIC_UNTAGGED = frozenset({aten._softmax.default, aten._log_softmax.default, aten.cumsum.default,
                                  aten.cumprod.default, aten.masked_fill_.Scalar, aten.masked_fill_.Tensor})


def _elementwise(func, args, kwargs, result) -> int:
    """Elements of floating-point tensors an arithmetic op (pointwise or a reduction, not a product, not a
    copy) reads or writes, its largest tensor's: ``(a[..., None, :] * b[..., None, :, :]).sum(-1)`` counts
    as much as ``a @ b.T``'s FLOPs (its multiply and its sum each touch rows x columns x depth elements)."""
    if func in _NOT_ARITHMETIC or func in _FLOPS:
        return 0
    tags = func.tags
    if not (torch.Tag.pointwise in tags or torch.Tag.reduction in tags or func in _ARITHMETIC_UNTAGGED):
        return 0
    sizes = [value.numel() for value in tree_flatten((args, kwargs, result))[0]
             if isinstance(value, torch.Tensor) and value.is_floating_point()]
    return max(sizes, default=0)


@dataclass
class ComputeEvent:
    """One counted op: its aten name, FLOPs, and when it ran (``time.perf_counter()``, as traffic does)."""

    op: str
    flops: int
    start: float
    end: float


@dataclass
class ComputeLog:
    """What one block of a rank ran: counted products, communication ops, and its peak new tensor bytes."""

    rank: int = 0
    events: list[ComputeEvent] = field(default_factory=list)
    communication: list[str] = field(default_factory=list)   # e.g. "c10d.send", "_c10d_functional.<op>"
    peak_bytes: int = 0        # the most bytes of tensors made inside the block that were alive at once
    live_bytes: int = 0
    elementwise: int = 0       # elements touched by arithmetic that is not a product (``_elementwise``)

    def flops(self) -> int:
        """FLOPs of the matrix products (and attention kernels) the block ran."""
        return sum(event.flops for event in self.events)

    def arithmetic(self) -> int:
        """All the block's arithmetic: its products' FLOPs plus one per element each other arithmetic op
        touched (a product written as a broadcast multiply and a sum counts as a product's FLOPs)."""
        return self.flops() + self.elementwise

    def collectives(self) -> list[str]:
        """The communication ops that are not point-to-point (a send or a receive)."""
        return [op for op in self.communication if op.split(".")[1] not in NOT_COLLECTIVES]

    def spans(self, label: str = "compute") -> list[tuple[str, float, float]]:
        """(label, start, end) of every counted op, for ``TrafficLog.spans`` and ``traffic_timeline``."""
        return [(label, event.start, event.end) for event in self.events]


def _storage(value):
    """A tensor's storage, or None: not a tensor, or one without readable memory (meta, a wrapper
    subclass such as a functional collective's pending result)."""
    if not isinstance(value, torch.Tensor) or value.device.type == "meta":
        return None
    try:
        storage = value.untyped_storage()
        storage.data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return storage


class _Recorder(TorchDispatchMode):
    def __init__(self, log: ComputeLog):
        super().__init__()
        self.log, self.alive = log, set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.log.live_bytes -= nbytes
        self.alive.discard(key)

    def _note_new(self, result, inputs: set) -> None:
        for value in tree_flatten(result)[0]:
            storage = _storage(value)
            if storage is None:
                continue
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in inputs or key in self.alive:
                continue           # a view, an in-place result, or a tensor already counted
            self.alive.add(key)
            self.log.live_bytes += nbytes
            self.log.peak_bytes = max(self.log.peak_bytes, self.log.live_bytes)
            weakref.finalize(storage, self._freed, key, nbytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        namespace = func.namespace
        if namespace in _COMM_NAMESPACES:
            self.log.communication.append(f"{namespace}.{func.__name__.split('.')[0]}")
        inputs = {storage.data_ptr() for storage in map(_storage, tree_flatten((args, kwargs))[0])
                  if storage is not None}
        counter = _FLOPS.get(func)
        start = time.perf_counter()
        result = func(*args, **kwargs)
        if counter is not None:
            flops = int(counter(*args, **kwargs))
            name = func.__name__.split(".")[0]
            self.log.events.append(ComputeEvent(name, flops, start, time.perf_counter()))
        else:
            self.log.elementwise += _elementwise(func, args, kwargs, result)
        self._note_new(result, inputs)
        return result


@contextlib.contextmanager
def record_compute(rank: int | None = None):
    """Record the products, communication ops and new tensor memory of the block into a ``ComputeLog``.

    ``rank`` names the log (default: this process's rank when a process group is up, else 0). Memory
    counts the storage of every tensor an op inside the block makes, until it is freed; tensors made
    before the block (its inputs) are not counted.
    """
    if rank is None:
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    warm_up()
    log = ComputeLog(rank)
    with _Recorder(log):
        yield log



_WARMED = False


def warm_up() -> None:
    """Pay, once per process, what a dispatch mode's first op costs: torch wraps every
    ``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call imports torch._dynamo (seconds).
    Call it before forking ranks that record compute, so that they inherit it instead of each importing
    it against their timeout; ``record_compute`` calls it too."""
    global _WARMED
    if not _WARMED:
        _WARMED = True
        with _Recorder(ComputeLog()):
            torch.zeros(1)
