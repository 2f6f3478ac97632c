"""A training step's time in closed form, for ranking thousands of layouts without building timelines.

Same per-layer costs as simulate_training_step (CostModel); the pipeline and the data-parallel stream are
summed analytically instead of played event by event. tests/sim/test_estimate.py bounds the difference.
"""

from __future__ import annotations

from ..step.costs import CostModel


def _bucket_tail(blocks, costs, op: str, issue_gap: bool) -> tuple:
    """(seconds the gradient buckets of one backward keep the stream busy after it ends, their total).

    Replays torch DDP's bucketing over the blocks in backward order (first bucket 1 MiB, then 25 MiB).
    """
    c, stream, t, busy = costs.config, 0.0, 0.0, 0.0
    pending, sent = 0.0, 0
    for block in reversed(blocks):
        t += block.bwd_time
        pending += block.params * c.grad_bytes
        if issue_gap and pending >= (c.bucket_bytes if sent else c.first_bucket_bytes):
            seconds = costs.dp_collective(op, pending)
            stream, busy = max(stream, t) + seconds, busy + seconds
            pending, sent = 0.0, sent + 1
    if pending > 0:
        seconds = costs.dp_collective(op, pending)
        stream, busy = max(stream, t) + seconds, busy + seconds
    return max(0.0, stream - t), busy


def _fsdp_pass(blocks, costs, backward: bool) -> tuple:
    """(seconds, stream seconds) of one FSDP pass over ``blocks`` with an idle stream at its start."""
    c = costs.config
    order = blocks[::-1] if backward else blocks

    def gather(block):
        return costs.dp_collective("all_gather", block.params * c.param_bytes)

    stream, t = gather(order[0]), 0.0
    for i, block in enumerate(order):
        t = max(t, stream)
        if c.prefetch and i + 1 < len(order):
            stream = max(stream, t) + gather(order[i + 1])
        t += block.bwd_time if backward else block.fwd_time
        if not c.prefetch and i + 1 < len(order):
            stream = max(stream, t) + gather(order[i + 1])
        if backward:
            stream = max(stream, t) + costs.dp_collective("reduce_scatter", block.params * c.grad_bytes)
    return t, max(0.0, stream - t)


def _stage_costs(costs, stage: int) -> tuple:
    """(forward, backward, tail after the last backward, extra stream seconds per backward) of a stage."""
    c = costs.config
    p, v = c.pp, c.virtual_stages
    pieces = [costs.pieces[chunk * p + stage] for chunk in range(v)]
    blocks = [b for piece in pieces for b in piece]
    if c.zero_stage == 3:
        fwd = sum(_fsdp_pass(piece, costs, False)[0] for piece in pieces)
        bwd_and_tail = [_fsdp_pass(piece, costs, True) for piece in pieces]
        return fwd, sum(x[0] for x in bwd_and_tail), bwd_and_tail[0][1], 0.0
    fwd = sum(b.fwd_time for b in blocks)
    bwd = sum(b.bwd_time for b in blocks)
    op = "all_reduce" if c.zero_stage == 0 else "reduce_scatter"
    tail, _ = _bucket_tail(pieces[0], costs, op, c.overlap)
    per_backward = 0.0
    if c.zero_stage == 2:   # sharded gradients are reduced after every micro-batch's backward
        per_backward = sum(_bucket_tail(piece, costs, op, c.overlap)[1] for piece in pieces) / v
        if not c.overlap:   # then the backward waits for them
            bwd, per_backward = bwd + per_backward * v, 0.0
    if c.zero_stage in (1, 2) and not c.overlap_param_gather:   # with it: beside the forwards, hidden
        params = sum(b.params for b in blocks) * c.param_bytes
        tail += costs.dp_collective("all_gather", params)
    return fwd, bwd, tail, per_backward


def estimate_step_time(config, cluster) -> float:
    """Seconds of one training step of a validated StepConfig on ``cluster``, without a timeline.

    Pipeline: (m - 1) x the slowest stage's forward + backward, plus one pass of every stage (divided by
    the virtual stages), plus the hops; exact for equal stages. Then each stage's data-parallel tail.
    """
    costs = CostModel(config, cluster)
    p, v, m = config.pp, config.virtual_stages, config.microbatches
    stages = [_stage_costs(costs, s) for s in range(p)]
    work = [f + b for f, b, _, _ in stages]
    slowest = max(work)
    if config.pipeline_kind == "gpipe":
        pipeline = (m - 1) * slowest + sum(work)
    else:
        pipeline = m * slowest + (sum(work) - slowest) / v
    hops = 2 * (p * v - 1) * costs.t_hop if p > 1 else 0.0
    end = pipeline + hops
    step, behind = 0.0, 0.0
    for _, b, tail, per_backward in stages:
        # a stage finishes its last backward after the stages before it have (1F1B drains toward stage 0)
        last_backward_end = end - behind
        behind += b / v + costs.t_hop
        step = max(step, last_backward_end + tail)
        if per_backward:   # ZeRO-2: the stream may fall behind, one reduce-scatter per backward
            first_backward_start = last_backward_end - (m - 1) * slowest - b / v
            step = max(step, first_backward_start + m * v * per_backward)
    return step
