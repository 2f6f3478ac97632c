"""Recording (and forbidding) the communication calls a rank makes, for graders and for the lessons.

Inside ``with record_traffic() as log:`` every ``torch.distributed`` point-to-point and collective call
of this process is timed and stored in ``log.events``; ``forbid=`` turns chosen calls into a clear error.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from dataclasses import dataclass, field

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from ..launch.errors import ForbiddenCallError
from .traffic_sizes import bytes_sent_to, call_bytes, tensor_bytes

POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
                  "recv_object_list")
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "scatter", "gather", "all_to_all", "all_to_all_single", "barrier",
               "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list")
GROUPS = {"collectives": COLLECTIVES, "point_to_point": POINT_TO_POINT}
_CORE = ("send", "recv", "isend", "irecv", "broadcast", "all_reduce", "reduce", "all_gather",
         "reduce_scatter", "scatter", "gather", "all_to_all")
# ProcessGroup methods reach the backend without the torch.distributed functions: a submission calling
# them directly must neither escape a forbid nor go unrecorded.
_GROUP_METHODS = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "broadcast": "broadcast",
                  "reduce": "reduce", "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor",
                  "all_gather_single": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter",
                  "_reduce_scatter_base": "reduce_scatter_tensor",
                  "reduce_scatter_single": "reduce_scatter_tensor", "alltoall": "all_to_all",
                  "alltoall_base": "all_to_all_single", "all_to_all_single": "all_to_all_single",
                  "scatter": "scatter", "gather": "gather", "send": "send", "recv": "recv",
                  "recv_anysource": "recv", "barrier": "barrier"}
_PEER_ARGUMENT = {"send": ("dst", 1), "isend": ("dst", 1), "recv": ("src", 1), "irecv": ("src", 1),
                  "send_object_list": ("dst", 1), "recv_object_list": ("src", 1)}


@dataclass
class TrafficEvent:
    """One call: ``peer`` is the other rank of a point-to-point call (None for a collective).

    ``nbytes`` follows the nccl-tests convention: the tensor for send/recv/all_reduce/broadcast/reduce,
    the whole gathered buffer for all_gather/gather, the whole input for reduce_scatter/scatter/
    all_to_all. Times are ``time.perf_counter()`` seconds, one clock shared by all ranks of a machine;
    for non-blocking calls ``end`` is when ``wait()`` returned. ``sent_to`` (all-to-all calls only): the
    bytes this rank sent to each rank of the group, in rank order, its own share included.
    """

    rank: int
    op: str
    peer: int | None
    nbytes: int
    start: float
    end: float
    sent_to: tuple[int, ...] | None = None


@dataclass
class TrafficLog:
    """What one rank recorded; picklable, so a rank function can return it to the notebook."""

    rank: int
    events: list[TrafficEvent] = field(default_factory=list)
    spans: list[tuple[str, float, float]] = field(default_factory=list)   # (label, start, end) of work

    @contextlib.contextmanager
    def span(self, label: str):
        """Note when the work inside the block (a forward, a backward) ran, on the events' clock."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.spans.append((str(label), start, time.perf_counter()))

    def bytes_sent(self) -> int:
        """Bytes this rank sent point-to-point (send and isend)."""
        return sum(event.nbytes for event in self.events if event.op in ("send", "isend"))

    def total_bytes(self, op: str) -> int:
        return sum(event.nbytes for event in self.events if event.op == op)

    def ops(self) -> list[str]:
        return [event.op for event in self.events]


class _TimedWork:
    """Stands for the Work handle of a non-blocking call and notes when ``wait()`` returns."""

    def __init__(self, work, event: TrafficEvent):
        self._work, self._event = work, event

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        self._event.end = time.perf_counter()
        return result

    def get_future(self):
        """The work's future; the event ends when it completes (a DDP communication hook never waits)."""
        def note_end(done):
            self._event.end = max(self._event.end, time.perf_counter())
            return done.value()

        return self._work.get_future().then(note_end)

    def __getattr__(self, name):
        return getattr(self._work, name)


class _Recorder:
    def __init__(self, log: TrafficLog, forbidden: dict[str, str]):
        self.log, self.forbidden, self.local = log, forbidden, threading.local()
        self.pending: list[TrafficEvent] = []

    def wrap(self, op: str, original):
        @functools.wraps(original)
        def recorded(*args, **kwargs):
            if getattr(self.local, "depth", 0):
                return original(*args, **kwargs)  # a call made by another recorded call: count once
            if op in self.forbidden:
                raise ForbiddenCallError(self.forbidden[op])
            self.local.depth = 1
            try:
                return self._timed(op, original, args, kwargs)
            finally:
                self.local.depth = 0

        del recorded.__wrapped__  # do not hand a submission the unrecorded original
        return recorded

    def wrap_method(self, op: str, original):
        """A ProcessGroup method called directly (not through torch.distributed's functions)."""
        @functools.wraps(original, assigned=("__name__", "__qualname__", "__doc__"), updated=())
        def recorded(group, *args, **kwargs):
            if getattr(self.local, "depth", 0):
                return original(group, *args, **kwargs)
            if op in self.forbidden:
                raise ForbiddenCallError(self.forbidden[op])
            self.local.depth = 1
            try:
                start = time.perf_counter()
                work = original(group, *args, **kwargs)
                peer = args[1] if op in ("send", "recv") and len(args) > 1 else None
                # nccl-tests' convention, as for the functions: a reduce-scatter counts its input
                scatter = op.startswith("reduce_scatter") and len(args) > 1
                counted = args[1] if scatter else (args[0] if args else None)
                sent = bytes_sent_to(op, args, {}, group) if op == "all_to_all_single" else None
                event = TrafficEvent(self.log.rank, op, peer, tensor_bytes(counted), start, start, sent)
                self.log.events.append(event)
                self.pending.append(event)
                return _TimedWork(work, event) if hasattr(work, "wait") else work
            finally:
                self.local.depth = 0

        return recorded

    def _timed(self, op, original, args, kwargs):
        start = time.perf_counter()
        result = original(*args, **kwargs)
        end = time.perf_counter()
        if op == "batch_isend_irecv":
            return self._batch(args[0] if args else kwargs["p2p_op_list"], result, start)
        peer = None
        if op in _PEER_ARGUMENT:
            name, index = _PEER_ARGUMENT[op]
            peer = kwargs.get(name, args[index] if len(args) > index else None)
            if peer is None and op == "recv":
                peer = result  # recv from any source returns the sender
        event = TrafficEvent(self.log.rank, op, peer, call_bytes(op, args, kwargs), start, end,
                             bytes_sent_to(op, args, kwargs))
        self.log.events.append(event)
        if result is not None and hasattr(result, "wait") and op not in ("recv",):
            event.end = start
            self.pending.append(event)
            return _TimedWork(result, event)
        return result

    def _batch(self, operations, works, start):
        wrapped = []
        for operation, work in zip(operations, works or [], strict=False):
            op = "isend" if getattr(operation.op, "__name__", "").endswith("isend") else "irecv"
            nbytes = tensor_bytes(operation.tensor)
            event = TrafficEvent(self.log.rank, op, operation.peer, nbytes, start, start)
            self.log.events.append(event)
            self.pending.append(event)
            wrapped.append(_TimedWork(work, event))
        return wrapped


_ACTIVE = threading.Lock()


def _forbidden_messages(forbid, reason: str | None) -> dict[str, str]:
    if isinstance(forbid, str):
        forbid = (forbid,)
    names: list[str] = []
    for name in forbid:
        if name in GROUPS:
            names += GROUPS[name]
        elif name in POINT_TO_POINT + COLLECTIVES:
            names.append(name)
        else:
            raise ValueError(f"record_traffic cannot forbid {name!r}: name torch.distributed calls such as "
                             f"{', '.join(_CORE)}, or a group: {', '.join(GROUPS)}")
    if reason is None:
        allowed = [name for name in _CORE if name not in names]
        reason = (f"this exercise must be built from {'/'.join(allowed)}" if 0 < len(allowed) <= 4
                  else "this exercise does not allow every call")
    return {name: f"{reason}: dist.{name} is not allowed" for name in names}


@contextlib.contextmanager
def record_traffic(forbid=(), reason: str | None = None):
    """Record this rank's communication calls into ``log.events``; calls named in ``forbid`` raise.

    Sees the ``torch.distributed`` functions and ``ProcessGroup`` methods called from Python; traffic
    started inside C++ (DDP's gradient reducer, DTensor's functional collectives) is not seen.

    ``forbid`` takes call names (``"all_reduce"``) or the groups ``"collectives"`` and
    ``"point_to_point"``. ``reason`` starts the error message, e.g. "this exercise must be built from
    send/recv/isend/irecv" gives "...: dist.all_reduce is not allowed". Use inside a rank.
    """
    if not dist.is_initialized():
        raise RuntimeError("record_traffic is used inside a rank, after the process group is initialised "
                           "(inside a function run by run_ranks or by course_lib.real.launch.torchrun)")
    forbidden = _forbidden_messages(forbid, reason)
    if not _ACTIVE.acquire(blocking=False):
        raise RuntimeError("record_traffic is already active in this process; do not nest it")
    log = TrafficLog(dist.get_rank())
    recorder = _Recorder(log, forbidden)
    saved = []
    try:
        for op in POINT_TO_POINT + COLLECTIVES:
            original = getattr(c10d, op, None)
            if original is None:
                continue
            wrapper = recorder.wrap(op, original)  # one object in both modules: torch compares with `is`
            for module in (dist, c10d):
                if hasattr(module, op):
                    saved.append((module, op, getattr(module, op)))
                    setattr(module, op, wrapper)
        for method, op in _GROUP_METHODS.items():
            original = dist.ProcessGroup.__dict__.get(method)  # the raw descriptor, so it restores as-is
            if original is not None:
                saved.append((dist.ProcessGroup, method, original))
                setattr(dist.ProcessGroup, method, recorder.wrap_method(op, original))
        yield log
    finally:
        for module, op, original in reversed(saved):
            setattr(module, op, original)
        now = time.perf_counter()
        for event in recorder.pending:
            if event.end == event.start:
                event.end = now  # never waited on inside the block: count it as open until the end
        _ACTIVE.release()
