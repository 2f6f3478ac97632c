"""Turn one pipeline stage's placed ops into timeline events: layers, TP/CP traffic, pipeline sends,
DDP gradient buckets overlapping the backward, ZeRO reduce-scatters and FSDP all-gathers with prefetch."""

from __future__ import annotations

from ..collectives.cost import nccl_algorithm
from ..timeline import Span, span

# Spans are copied to their place on the clock by the million: tuple.__new__ skips NamedTuple's __new__.
shifted = tuple.__new__


class _CommStream:
    """The data-parallel communication stream of a device: collectives run one after another, each
    costed by ``CostModel.dp_collective`` (the preset's own ring on a calibrated machine)."""

    def __init__(self, costs, events):
        self.costs, self.events, self.clock = costs, events, 0.0
        c = costs.config
        self.degree, self.link, self.algorithm = costs.shard_degree, costs.dp_link, c.dp_algorithm
        self.known: dict = {}   # (op, nbytes) -> (seconds, size label): every micro-batch repeats them

    def launch(self, op: str, nbytes: float, issue: float, label: str) -> float:
        known = self.known.get((op, nbytes))
        if known is None:
            known = self.known[op, nbytes] = (self.costs.dp_collective(op, nbytes), self._size(op, nbytes))
        seconds, size = known
        start = self.clock if self.clock > issue else issue
        self.clock = start + seconds
        if seconds > 0:
            self.events.append(span(start, self.clock, "comm", label + size))
        return self.clock

    def _size(self, op: str, nbytes: float) -> str:
        """The size and the algorithm a label shows: NCCL's choice where the config leaves it to NCCL."""
        algorithm = self.algorithm
        if self.costs.cluster.preset.ring_options(op, algorithm):   # a calibrated machine: gloo's ring
            algorithm = "segmented ring"
        elif algorithm == "nccl" and self.degree > 1:
            algorithm = f"NCCL: {nccl_algorithm(op, nbytes, self.degree, self.link)}"
        return f" ({nbytes / 1e6:.3g} MB, {algorithm})"

    def gather(self, block, param_bytes: float, issue: float, tag: str) -> float:
        """FSDP: all-gather one block's parameter shards before it runs."""
        label = f"{tag}FSDP all-gather {block.name}"
        return self.launch("all_gather", block.params * param_bytes, issue, label)


def _back_to_back(order: list, phase: str) -> tuple:
    """A piece's events with its blocks back to back from 0, each block's (end, parameters), its length."""
    flat, ends, t = [], [], 0.0
    for block in order:
        rel = block.fwd if phase == "F" else block.bwd
        flat.extend([shifted(Span, (t + start, t + end, kind, label, meta))
                     for start, end, kind, label, meta in rel])
        t += block.fwd_time if phase == "F" else block.bwd_time
        ends.append((t, block.params))
    return flat, ends, t


def _fsdp_piece(stream, order: list, phase: str, t: float, tag: str, c) -> float:
    """ZeRO-3: each block waits for its all-gathered parameters; backwards reduce-scatter their grads."""
    gathered = {0: stream.gather(order[0], c.param_bytes, t, tag)}
    for i, block in enumerate(order):
        t = max(t, gathered[i])
        if c.prefetch and i + 1 < len(order):
            gathered[i + 1] = stream.gather(order[i + 1], c.param_bytes, t, tag)
        rel = block.fwd if phase == "F" else block.bwd
        stream.events.extend([shifted(Span, (t + start, t + end, kind, tag + label, meta))
                              for start, end, kind, label, meta in rel])
        t += block.fwd_time if phase == "F" else block.bwd_time
        if not c.prefetch and i + 1 < len(order):
            gathered[i + 1] = stream.gather(order[i + 1], c.param_bytes, t, tag)
        if phase == "B":
            stream.launch("reduce_scatter", block.params * c.grad_bytes, t,
                          f"{tag}FSDP reduce-scatter grad {block.name}")
    return t


def lower_stage(stage: int, placed: list, costs) -> list:
    """Events of every device of ``stage``; ``placed`` is play_schedule's (op, start, end) list."""
    c = costs.config
    p, v, zero = c.pp, c.virtual_stages, c.zero_stage
    last = p * v - 1
    events: list = []
    stream = _CommStream(costs, events)
    if c.overlap_param_gather:   # last step's updated parameters, gathered beside this step's forwards
        stream.launch("all_gather", _stage_param_bytes(stage, costs), 0.0,
                      "ZeRO all-gather updated parameters (overlap_param_gather)")
    last_backward = {op[2]: i for i, (op, _, _) in enumerate(placed) if op[0] == "B"}
    grad_bytes = c.grad_bytes
    sync_op = "all_reduce" if zero == 0 else "reduce_scatter"
    pending_total = 0.0
    t_clock = 0.0
    back_to_back: dict = {}   # (phase, piece) -> its blocks' events from 0: every micro-batch repeats them
    for index, ((phase, mb, chunk), start, _) in enumerate(placed):
        j = chunk * p + stage
        blocks = costs.pieces[j]
        t = t_clock if t_clock > start else start
        tag = f"{phase}{mb} " if v == 1 else f"{phase}{mb}.{chunk} "
        order = blocks if phase == "F" else blocks[::-1]
        sync = phase == "B" and (zero >= 2 or index == last_backward[chunk])
        pending, buckets_sent = 0.0, 0
        if zero == 3:
            t = _fsdp_piece(stream, order, phase, t, tag, c)
        else:
            if (phase, j) not in back_to_back:
                back_to_back[phase, j] = _back_to_back(order, phase)
            flat, ends, length = back_to_back[phase, j]
            events.extend([shifted(Span, (t + start, t + end, kind, tag + label, meta))
                           for start, end, kind, label, meta in flat])
            for end, params in (ends if sync else ()):
                pending += params * grad_bytes
                if c.overlap and pending >= (c.bucket_bytes if buckets_sent else c.first_bucket_bytes):
                    stream.launch(sync_op, pending, t + end, f"{tag}DP {sync_op} bucket")
                    pending, buckets_sent = 0.0, buckets_sent + 1
            t += length
        if sync and pending > 0:
            if c.overlap:
                stream.launch(sync_op, pending, t, f"{tag}DP {sync_op} bucket")
            elif zero == 2:   # without overlap the sharded gradients are reduced before going on
                t = stream.launch(sync_op, pending, t, f"{tag}DP {sync_op} gradients")
            else:
                pending_total += pending
        target = j + 1 if phase == "F" else j - 1
        if p > 1 and c.p2p_overlap and 0 <= target <= last and target % p != stage:   # else in the blocks
            what = "activation" if phase == "F" else "gradient"
            events.append(span(t, t + costs.t_p2p, "comm", f"{tag}send {what} -> stage {target % p}"))
        t_clock = t
    _after_last_op(stage, costs, stream, pending_total, t_clock)
    return events


def _after_last_op(stage: int, costs, stream: _CommStream, pending_total: float, t_clock: float) -> None:
    """The step's end: gradients not yet synchronised (no overlap), the optimizer update where the preset
    charges it (a measured CPU: ``costs.update_seconds``, once every gradient has arrived), then ZeRO-1/2's
    parameter all-gather."""
    c = costs.config
    sync_op = "all_reduce" if c.zero_stage == 0 else "reduce_scatter"
    if pending_total > 0:
        stream.launch(sync_op, pending_total, t_clock, f"DP {sync_op} gradients")
    updated = _stage_param_bytes(stage, costs) / c.param_bytes   # ZeRO: each device updates its shard
    update = costs.update_seconds(updated / costs.shard_degree if c.zero_stage >= 1 else updated)
    if update > 0:
        start = max(stream.clock, t_clock)
        stream.events.append(span(start, start + update, "compute", "optimizer update (memory)"))
        t_clock = start + update
    if c.zero_stage in (1, 2) and not c.overlap_param_gather:
        stream.launch("all_gather", _stage_param_bytes(stage, costs), max(stream.clock, t_clock),
                      "ZeRO all-gather updated parameters")


def _stage_param_bytes(stage: int, costs) -> float:
    """Bytes of the parameters one device of ``stage`` holds: what ZeRO-1/2 all-gather after the update."""
    c = costs.config
    last = c.pp * c.virtual_stages - 1
    return sum(b.params for j in range(stage, last + 1, c.pp) for b in costs.pieces[j]) * c.param_bytes
