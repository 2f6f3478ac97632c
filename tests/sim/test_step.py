"""simulate_training_step from 0D to 4D: hand-computed small cases and the orderings the course shows."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim import (
    COURSE_MLP,
    LLAMA3_8B,
    LLAMA3_405B,
    Link,
    MLPSpec,
    OutOfMemoryError,
    TransformerSpec,
    collective_time,
    make_cluster,
    simulate_training_step,
)
from course_lib.sim.cluster.presets import H100

SMALL = TransformerSpec(8, 1024, 16, 1024, 32000, name="small")
# The H100 with its non-matmul layers free (no memory bandwidth): step times are the matmuls' alone.
MATMULS_ONLY = dataclasses.replace(H100, memory_bandwidth=None)


def test_single_device_step_is_training_flops_over_flops():
    cluster = make_cluster(1, 1, preset=MATMULS_ONLY)
    report = simulate_training_step(SMALL, cluster)
    expected = SMALL.training_flops(1024) / cluster.preset.flops
    assert report.step_time == pytest.approx(expected)
    assert report.mfu == pytest.approx(cluster.preset.flops / cluster.preset.peak_flops)
    assert report.tokens_per_second == pytest.approx(1024 / expected)
    assert report.bubble_fraction == pytest.approx(0.0, abs=1e-12)


def test_course_mlp_runs_on_a_laptop_preset():
    report = simulate_training_step(COURSE_MLP, make_cluster(1, 2, "laptop_cpu"), dp=2, global_batch=64)
    assert report.step_time > 0 and report.config.micro_batch_size == 32


def test_data_parallel_without_overlap_adds_one_all_reduce():
    cluster = make_cluster(1, 8)
    single = simulate_training_step(SMALL, make_cluster(1, 1)).step_time
    ring = simulate_training_step(SMALL, cluster, dp=8, overlap=False)
    grads = SMALL.num_params * 2
    expected = single + collective_time("all_reduce", grads, 8, cluster.preset.intra_node)
    assert ring.step_time == pytest.approx(expected)
    server = simulate_training_step(SMALL, cluster, dp=8, overlap=False, dp_algorithm="parameter_server")
    assert server.step_time > ring.step_time


def test_ddp_buckets_hide_communication_behind_the_backward():
    cluster = make_cluster(4, 8, inter_node=Link(10e-6, 25e9))
    batch = dict(dp=32, global_batch=32 * 16)
    plain = simulate_training_step(SMALL, cluster, overlap=False, **batch)
    ddp = simulate_training_step(SMALL, cluster, overlap=True, **batch)
    assert ddp.step_time < plain.step_time
    compute_end = max(e.end for e in ddp.timeline.events(0) if e.kind == "compute")
    buckets = [e for e in ddp.timeline.events(0) if "bucket" in e.label]
    assert len(buckets) > 1 and buckets[0].start < compute_end <= ddp.step_time


def test_zero_stages_trade_speed_for_memory_in_the_seed_order():
    # ZeRO-1 and 2 move the same bytes: on a network fast enough to hide them (8 NICs of 10 GB/s)
    # they take the same time; on 10 Gb/s Ethernet ZeRO-2's per-micro-batch reduce-scatters show.
    hidden = make_cluster(2, 8, inter_node=Link(10e-6, 10e9))
    same = [simulate_training_step(LLAMA3_8B, hidden, dp=16, zero_stage=z, microbatches=4,
                                   recompute="full").step_time for z in (1, 2)]
    assert same[0] == pytest.approx(same[1])
    cluster = make_cluster(2, 8, inter_node=Link(10e-6, 1.25e9))
    reports = [simulate_training_step(LLAMA3_8B, cluster, dp=16, zero_stage=z, microbatches=4,
                                      recompute="full") for z in (1, 2, 3)]
    times = [r.step_time for r in reports]
    memory = [r.peak_memory for r in reports]
    assert times[0] < times[1] < times[2]
    assert memory[0] > memory[1] > memory[2]
    fsdp_events = [e.label for e in reports[2].timeline.events(0) if "FSDP" in e.label]
    assert any("all-gather" in x for x in fsdp_events) and any("reduce-scatter" in x for x in fsdp_events)


def test_tensor_parallel_has_two_all_reduces_each_way_per_layer():
    report = simulate_training_step(SMALL, make_cluster(1, 4), tp=4, microbatches=2, global_batch=2)
    tp_events = [e for e in report.timeline.events(0) if "TP" in e.label]
    assert len(tp_events) == SMALL.layers * 4 * 2


def test_naive_model_parallel_idles_and_microbatches_help():
    cluster = make_cluster(1, 4)
    naive = simulate_training_step(SMALL, cluster, pp=4, microbatches=1, global_batch=8)
    piped = simulate_training_step(SMALL, cluster, pp=4, microbatches=8, global_batch=8)
    assert naive.bubble_fraction > 0.7
    assert piped.step_time < naive.step_time and piped.bubble_fraction < naive.bubble_fraction
    inter = simulate_training_step(SMALL, cluster, pp=4, microbatches=8, global_batch=8,
                                   schedule="interleaved_1f1b", virtual_stages=2)
    assert inter.bubble_fraction < piped.bubble_fraction


def test_placement_decides_which_link_tensor_parallel_uses():
    cluster = make_cluster(2, 4)
    inner = simulate_training_step(SMALL, cluster, tp=4, dp=2)
    outer = simulate_training_step(SMALL, cluster, tp=4, dp=2, placement=("dp", "tp", "cp", "pp"))
    assert outer.step_time > inner.step_time


def test_every_rank_has_its_lane_and_stage_lanes_match():
    report = simulate_training_step(SMALL, make_cluster(2, 8), dp=2, tp=2, pp=2, cp=2, microbatches=4,
                                    global_batch=8)
    t = report.timeline
    assert len(t.lanes) == 16
    stages = report.stage_of_rank
    assert all(t.lanes[r] == t.lanes[stages.index(stages[r])] for r in range(16))
    assert any("CP" in e.label for e in t.events(0))
    trace = t.to_perfetto(lanes=[0, 15])
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 15}
    distinct = t.to_perfetto(lanes="distinct")
    names = [e["args"]["name"] for e in distinct["traceEvents"] if e["name"] == "process_name"]
    assert len(names) == 2 and names[0] == "rank 0 (and 7 identical ranks)"


def test_4d_llama_405b_on_1024_gpus():
    report = simulate_training_step(LLAMA3_405B, make_cluster(128, 8), dp=8, tp=8, pp=16, zero_stage=1,
                                    microbatches=16, global_batch=128, recompute="full")
    assert 0.2 < report.mfu < 0.75
    assert report.peak_memory < 80e9 and report.timeline.num_events > 1_000_000


def test_out_of_memory_is_reported_with_the_excess():
    with pytest.raises(OutOfMemoryError, match="too much") as info:
        simulate_training_step(LLAMA3_8B, make_cluster(1, 1))
    assert info.value.needed > info.value.available == 80e9 - 4e9   # the memory less its reserve
    report = simulate_training_step(LLAMA3_8B, make_cluster(1, 1), check_memory=False)
    assert not report.memory_per_device[0].fits


@pytest.mark.parametrize("kwargs,match", [
    (dict(dp=3), "multiply to the world size"),
    (dict(dp=4, zero_stage=5), "zero_stage"),
    (dict(pp=4, microbatches=2, schedule="interleaved_1f1b", virtual_stages=2), "multiple of the stage"),
    (dict(dp=4, global_batch=6), "multiple of dp"),
    (dict(tp=4, placement=("tp", "dp")), "placement"),
    (dict(dp=4, microbatches=-1), "microbatches"),
    (dict(tp=4, recompute="most"), "recompute"),
])
def test_bad_configurations_say_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate_training_step(SMALL, make_cluster(1, 4), **kwargs)


def test_mlp_refuses_tensor_parallel():
    with pytest.raises(ValueError, match="too small"):
        simulate_training_step(COURSE_MLP, make_cluster(1, 2), tp=2)


@settings(database=None, max_examples=60, deadline=None)
@given(dp=st.sampled_from([1, 2]), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]),
       cp=st.sampled_from([1, 2]), zero=st.integers(0, 3), groups=st.integers(1, 3),
       schedule=st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b"]), recompute=st.sampled_from(
           ["none", "selective", "full"]), overlap=st.booleans())
def test_no_layout_beats_perfect_scaling(dp, tp, pp, cp, zero, groups, schedule, recompute, overlap):
    world = dp * tp * pp * cp
    cluster = make_cluster(max(1, world // 4), min(world, 4))
    m = pp * groups
    options = dict(dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=zero, microbatches=m, global_batch=dp * m,
                   schedule=schedule, recompute=recompute, overlap=overlap, check_memory=False,
                   virtual_stages=2 if schedule == "interleaved_1f1b" and pp > 1 else 1)
    try:
        report = simulate_training_step(SMALL, cluster, **options)
    except ValueError as error:     # only the documented refusals
        assert "virtual_stages > 1 needs" in str(error)
        return
    assert report.step_time >= report.model_flops / (world * cluster.preset.flops) * (1 - 1e-9)
    assert 0 < report.mfu <= cluster.preset.flops / cluster.preset.peak_flops + 1e-9
    assert len(report.timeline.lanes) == world


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_2_and_3_with_pipeline_parallel_pay_per_micro_batch(zero):
    cluster = make_cluster(1, 4, preset=MATMULS_ONLY)   # longer layers would hide ZeRO-3's gathers
    options = dict(dp=2, pp=2, microbatches=4, global_batch=8)
    base = simulate_training_step(SMALL, cluster, zero_stage=1, **options)
    report = simulate_training_step(SMALL, cluster, zero_stage=zero, **options)
    assert report.peak_memory < base.peak_memory
    assert report.step_time >= base.step_time
    labels = [e.label for e in report.timeline.events(0)]
    # The gradients of every micro-batch's backward are reduce-scattered, not once per step.
    assert {label.split()[0] for label in labels if "reduce-scatter" in label or "reduce_scatter" in label} \
        == {f"B{mb}" for mb in range(4)}
    if zero == 3:   # parameters gathered again before every forward and backward of every micro-batch
        gathered = {label.split()[0] for label in labels if "FSDP all-gather" in label}
        assert gathered == {f"{phase}{mb}" for phase in "FB" for mb in range(4)}


def test_ddp_closes_its_first_bucket_early_as_torch_does():
    # Gradients of 8.4, 16.8 and 8.4 MB (last layer first): torch closes the first bucket at 1 MiB, the
    # next at 25 MiB, so one bucket leaves after the last layer's backward and one at the end.
    mlp = MLPSpec((1024, 2048, 2048, 1024))
    cluster = make_cluster(1, 2, preset="h100")
    step = simulate_training_step(mlp, cluster, dp=2, global_batch=64, param_bytes=4, grad_bytes=4)
    buckets = [e for e in step.timeline.events(0) if "bucket" in e.label]
    assert [round(float(e.label.split("(")[1].split(" MB")[0]), 1) for e in buckets] == [8.4, 25.2]
    late = simulate_training_step(mlp, cluster, dp=2, global_batch=64, param_bytes=4, grad_bytes=4,
                                  first_bucket_bytes=25 * 2**20)
    assert len([e for e in late.timeline.events(0) if "bucket" in e.label]) == 1
