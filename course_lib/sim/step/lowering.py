"""Turn one pipeline stage's placed ops into timeline events: layers, TP/CP traffic, pipeline sends,
DDP gradient buckets overlapping the backward, ZeRO reduce-scatters and FSDP all-gathers with prefetch."""

from __future__ import annotations

from ..collectives.cost import collective_time


class _CommStream:
    """The data-parallel communication stream of a device: collectives run one after another."""

    def __init__(self, costs, events):
        self.costs, self.events, self.clock = costs, events, 0.0
        c = costs.config
        self.degree, self.link, self.algorithm = costs.shard_degree, costs.dp_link, c.dp_algorithm

    def launch(self, op: str, nbytes: float, issue: float, label: str) -> float:
        seconds = collective_time(op, nbytes, self.degree, self.link, self.algorithm)
        start = self.clock if self.clock > issue else issue
        self.clock = start + seconds
        if seconds > 0:
            self.events.append((start, self.clock, "comm", f"{label} ({nbytes / 1e6:.3g} MB)"))
        return self.clock

    def gather(self, block, param_bytes: float, issue: float, tag: str) -> float:
        """FSDP: all-gather one block's parameter shards before it runs."""
        label = f"{tag}FSDP all-gather {block.name}"
        return self.launch("all_gather", block.params * param_bytes, issue, label)


def lower_stage(stage: int, placed: list, costs) -> list:
    """Events of every device of ``stage``; ``placed`` is play_schedule's (op, start, end) list."""
    c = costs.config
    p, v, zero = c.pp, c.virtual_stages, c.zero_stage
    last = p * v - 1
    events: list = []
    stream = _CommStream(costs, events)
    last_backward = {op[2]: i for i, (op, _, _) in enumerate(placed) if op[0] == "B"}
    grad_bytes, param_bytes = c.grad_bytes, c.param_bytes
    sync_op = "all_reduce" if zero == 0 else "reduce_scatter"
    pending_total = 0.0
    t_clock = 0.0
    for index, ((phase, mb, chunk), start, _) in enumerate(placed):
        j = chunk * p + stage
        blocks = costs.pieces[j]
        t = t_clock if t_clock > start else start
        tag = f"{phase}{mb} " if v == 1 else f"{phase}{mb}.{chunk} "
        order = blocks if phase == "F" else blocks[::-1]
        gathered = {}
        if zero == 3:
            gathered[0] = stream.gather(order[0], param_bytes, t, tag)
        sync = phase == "B" and (zero >= 2 or index == last_backward[chunk])
        pending, buckets_sent = 0.0, 0
        for i, block in enumerate(order):
            if zero == 3:
                t = max(t, gathered[i])
                if c.prefetch and i + 1 < len(order):
                    gathered[i + 1] = stream.gather(order[i + 1], param_bytes, t, tag)
            rel = block.fwd if phase == "F" else block.bwd
            events.extend([(t + a, t + b, kind, tag + label) for a, b, kind, label in rel])
            t += block.fwd_time if phase == "F" else block.bwd_time
            if zero == 3:
                if not c.prefetch and i + 1 < len(order):
                    gathered[i + 1] = stream.gather(order[i + 1], param_bytes, t, tag)
                if phase == "B":
                    stream.launch("reduce_scatter", block.params * grad_bytes, t,
                                  f"{tag}FSDP reduce-scatter grad {block.name}")
            elif sync:
                pending += block.params * grad_bytes
                if c.overlap and pending >= (c.bucket_bytes if buckets_sent else c.first_bucket_bytes):
                    stream.launch(sync_op, pending, t, f"{tag}DP {sync_op} bucket")
                    pending, buckets_sent = 0.0, buckets_sent + 1
        if sync and pending > 0:
            if c.overlap:
                stream.launch(sync_op, pending, t, f"{tag}DP {sync_op} bucket")
            elif zero == 2:   # without overlap the sharded gradients are reduced before going on
                t = stream.launch(sync_op, pending, t, f"{tag}DP {sync_op} gradients")
            else:
                pending_total += pending
        target = j + 1 if phase == "F" else j - 1
        if p > 1 and 0 <= target <= last and target % p != stage:
            what = "activation" if phase == "F" else "gradient"
            events.append((t, t + costs.t_p2p, "comm", f"{tag}send {what} -> stage {target % p}"))
        t_clock = t
    _after_last_op(stage, costs, stream, pending_total, t_clock)
    return events


def _after_last_op(stage: int, costs, stream: _CommStream, pending_total: float, t_clock: float) -> None:
    """The step's end: gradients not yet synchronised (no overlap), then ZeRO-1/2's parameter all-gather."""
    c = costs.config
    sync_op = "all_reduce" if c.zero_stage == 0 else "reduce_scatter"
    if pending_total > 0:
        stream.launch(sync_op, pending_total, t_clock, f"DP {sync_op} gradients")
    if c.zero_stage in (1, 2):
        last = c.pp * c.virtual_stages - 1
        params = sum(b.params for j in range(stage, last + 1, c.pp) for b in costs.pieces[j])
        stream.launch("all_gather", params * c.param_bytes, max(stream.clock, t_clock),
                      "ZeRO all-gather updated parameters")
