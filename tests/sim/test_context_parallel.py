"""Context parallelism in the simulator: each method's bytes, messages and memory in closed form, the causal
work per rank under a layout, one ring attention's timeline, and cp_method in a whole training step."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from course_lib import sim

CHUNK = 2 * 16 * 8 * 8 * 8   # one rank's K and V: 2 x 16 tokens x 8 heads x 8 dims x 8 bytes (float64)


def test_ring_sends_what_all_gather_sends_but_holds_two_chunks():
    gather, ring = (sim.context_parallel_cost(method, 64, 4, 8, 8, bytes_per_element=8)
                    for method in ("all_gather", "ring"))
    assert gather.sent_bytes == ring.sent_bytes == 3 * CHUNK
    assert gather.messages == ring.messages == 3
    assert (gather.calls, ring.calls) == (1, 0)
    assert gather.kv_held_bytes == 4 * CHUNK and ring.kv_held_bytes == 2 * CHUNK


def test_ulysses_sends_h_plus_hkv_over_n_hkv_times_the_ring():
    for heads, kv_heads, cp in ((8, 8, 4), (16, 4, 4), (32, 8, 8), (16, 16, 2)):
        ring = sim.context_parallel_cost("ring", 256, cp, heads, 16, kv_heads=kv_heads)
        ulysses = sim.context_parallel_cost("ulysses", 256, cp, heads, 16, kv_heads=kv_heads)
        assert math.isclose(ulysses.sent_bytes / ring.sent_bytes, (heads + kv_heads) / (cp * kv_heads))
        assert ulysses.messages == 4 * (cp - 1) and ulysses.calls == 4
        assert ulysses.kv_held_bytes == ring.kv_held_bytes / 2    # H_kv/N heads of all the tokens: one chunk


def test_ulysses_copies_too_few_kv_heads_and_then_sends_more_than_the_ring():
    # Llama 3 405B's tensor-parallel rank at 128K: 16 query heads, 1 key/value head, CP 16
    ring = sim.context_parallel_cost("ring", 131072, 16, 16, 128, kv_heads=1)
    ulysses = sim.context_parallel_cost("ulysses", 131072, 16, 16, 128, kv_heads=1)
    assert ulysses.sent_bytes == 2 * ring.sent_bytes
    assert ulysses.kv_held_bytes == 16 * ring.kv_held_bytes / 2 and "copied" in ulysses.note


@pytest.mark.parametrize("call, message", [
    (dict(method="ulysses", tokens=96, cp=3, heads=8, head_dim=4), "divide the 8 heads"),
    (dict(method="ring", tokens=10, cp=4, heads=8, head_dim=4), "must divide the 10 tokens"),
    (dict(method="ulysses", tokens=64, cp=4, heads=12, head_dim=4, kv_heads=6), "one of the two must"),
    (dict(method="ring", tokens=64, cp=4, heads=8, head_dim=4, kv_heads=3), "must divide heads"),
    (dict(method="scatter", tokens=64, cp=4, heads=8, head_dim=4), "method must be one of"),
    (dict(method="ring", tokens=64, cp=0, heads=8, head_dim=4), "cp must be a whole number"),
])
def test_bad_costs_say_what_to_change(call, message):
    with pytest.raises(ValueError, match=message):
        sim.context_parallel_cost(**call)


def test_comm_seconds_is_alpha_beta():
    cost = sim.context_parallel_cost("ring", 64, 4, 8, 8)
    link = sim.Link(latency=1e-5, bandwidth=1e9)
    assert math.isclose(cost.comm_seconds(link), 3 * 1e-5 + cost.sent_bytes / 1e9)
    with pytest.raises(ValueError, match="link must be a Link"):
        cost.comm_seconds(None)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_causal_work_per_rank(n):
    contiguous, zigzag = sim.causal_work(n), sim.causal_work(n, "zigzag")
    assert contiguous == [r + 0.5 for r in range(n)]
    assert zigzag == [n / 2] * n
    assert math.isclose(sum(contiguous), sum(zigzag)) and math.isclose(sum(zigzag), n * n / 2)
    assert sim.causal_work(n, causal=False) == [float(n)] * n
    # the diagonal computed in full and masked: contiguous r + 1; zig-zag 3/4 on its own step
    assert sim.causal_work(n, triangle=1.0) == [r + 1.0 for r in range(n)]
    assert sim.causal_work(n, "zigzag", triangle=1.0) == [0.75 + (n - 1) / 2] * n


def test_causal_steps_skip_later_ranks_with_contiguous_chunks():
    work = sim.causal_step_work(4)
    assert work[0] == [0.5, 0.0, 0.0, 0.0]       # rank 0 sees only its own diagonal
    assert work[3] == [0.5, 1.0, 1.0, 1.0]
    assert all(row == [0.5] * 4 for row in sim.causal_step_work(4, "zigzag"))


def test_ring_timeline_is_compute_or_transfer_bound():
    compute_bound = sim.ring_attention_timeline(4, 1.0, 0.25)
    assert math.isclose(compute_bound.makespan, 4.0)
    transfer_bound = sim.ring_attention_timeline(4, 1.0, 2.0)
    assert math.isclose(transfer_bound.makespan, 1.0 + 3 * 2.0)
    sends = [e for e in compute_bound.events() if e.kind == "comm"]
    assert len(sends) == 4 * 3 and all(e.meta["peer"] == (e.lane + 1) % 4 for e in sends)
    assert sim.ring_attention_timeline(1, 1.0, 5.0).makespan == 1.0


def test_zigzag_balances_a_causal_ring_towards_two_times():
    speedups = []
    for n in (2, 4, 8, 16):
        contiguous = sim.ring_attention_timeline(n, 1.0, 0.1, causal=True).makespan
        zigzag = sim.ring_attention_timeline(n, 1.0, 0.1, causal=True, layout="zigzag").makespan
        speedups.append(contiguous / zigzag)
    assert speedups == sorted(speedups) and 1 < speedups[0] and speedups[-1] < 2
    with pytest.raises(ValueError, match="layout must be one of"):
        sim.ring_attention_timeline(4, 1.0, 0.1, layout="striped")


# -- cp_method in a whole training step -------------------------------------------------------------------
LONG = next(run for run in sim.PUBLISHED_RUNS if run.model.seq_len == 131072)


def _step(method, **changes):
    layout = {**LONG.layout, **changes}
    return sim.simulate_training_step(LONG.model, sim.make_cluster(2048, 8), cp_method=method, **layout)


def test_at_128k_the_ring_beats_the_exposed_all_gather_and_torchs_variant_sits_between():
    # Llama 3 section 3.3.2: the all-gather is "exposed in the critical path"; torch's all-gather variant
    # computes the local block while it travels; the ring hides each step behind the block before it.
    default = sim.simulate_training_step(LONG.model, sim.make_cluster(2048, 8), **LONG.layout)
    gather, ring, ulysses = (_step(m) for m in sim.CP_METHODS)
    local = _step("all_gather", cp_local_overlap=True)
    assert default.step_time == gather.step_time
    assert ring.step_time < local.step_time < gather.step_time < ulysses.step_time
    assert gather.step_time > 1.05 * ring.step_time
    assert any(e.label.endswith("CP ring K,V (15 steps)") for e in ring.timeline.events(0))
    labels = {e.label.split(" ", 2)[-1] for e in gather.timeline.events(0) if e.kind == "comm"}
    assert {"CP all-gather KV", "CP reduce-scatter dKV"} <= labels


def test_the_all_gather_is_exposed_before_the_attention_and_the_reduce_scatter_after():
    model = sim.TransformerSpec(2, 1024, 8, 8192, 32000, name="small")
    slow = sim.make_cluster(4, 1, preset=replace(sim.H100, inter_node=sim.Link(1e-3, 1e9)))
    fast = sim.make_cluster(4, 1, preset=replace(sim.H100, inter_node=sim.Link(0.0, math.inf)))
    exposed = list(sim.simulate_training_step(model, slow, cp=4).timeline.events(0))
    gathers = [e for e in exposed if e.label.endswith("CP all-gather KV")]
    attention = [e for e in exposed if e.label == "F0 L0 attention"]
    assert gathers and attention and attention[0].start >= gathers[0].end
    slower = sim.simulate_training_step(model, slow, cp=4).step_time
    assert slower > sim.simulate_training_step(model, fast, cp=4).step_time


def test_the_cp_groups_gradients_are_reduced_with_the_data_parallel_ones():
    # Megatron-Core folds CP into the data-parallel group for gradients: cp ranks hold the same weights.
    model = sim.TransformerSpec(2, 1024, 8, 8192, 32000, name="small")
    report = sim.simulate_training_step(model, sim.make_cluster(1, 4), cp=4)
    grads = [e for e in report.timeline.events(0) if e.kind == "comm" and "DP all_reduce" in e.label]
    assert grads
    alone = sim.simulate_training_step(model, sim.make_cluster(1, 4), cp=4, overlap=False)
    assert any("DP all_reduce gradients" in e.label for e in alone.timeline.events(0))


def test_cp_local_overlap_is_for_the_all_gather_only():
    with pytest.raises(ValueError, match="cp_local_overlap=True is torch's all-gather variant"):
        _step("ring", cp_local_overlap=True)


def test_ring_exposes_its_transfers_when_blocks_are_short():
    model = sim.TransformerSpec(4, 1024, 8, 8192, 32000, name="small")   # no data parallel traffic: dp=1
    slow = sim.make_cluster(8, 1, preset=replace(sim.H100, inter_node=sim.Link(1e-3, 1e9)))
    fast = sim.make_cluster(8, 1, preset=replace(sim.H100, inter_node=sim.Link(0.0, math.inf)))
    settings = dict(cp=8, cp_method="ring", recompute="selective")
    exposed = sim.simulate_training_step(model, slow, **settings).step_time
    assert exposed > 1.5 * sim.simulate_training_step(model, fast, **settings).step_time


def test_cp_method_is_checked():
    with pytest.raises(ValueError, match="cp_method must be one of"):
        _step("striped")
    with pytest.raises(ValueError, match="use a cp that divides 16"):
        _step("ulysses", cp=32, dp=4, global_batch=64)
