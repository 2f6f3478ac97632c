"""What chapter 08's prose says about its simulated numbers, asserted (the cells print the numbers)."""

import pytest

from course_lib import sim

LLAMA_BATCH = 16 * 2**20 // 8192
PUBLISHED = dict(dp=128, tp=8, pp=16, cp=1, microbatches=16, global_batch=LLAMA_BATCH, zero_stage=1)


def test_tensor_parallel_across_nodes_is_slower_than_inside():
    cluster = sim.make_cluster(2, 8)
    common = dict(dp=2, tp=8, microbatches=4, global_batch=8, zero_stage=1, recompute="selective")
    inside = sim.simulate_training_step(sim.LLAMA3_8B, cluster, placement=("tp", "cp", "dp", "pp"), **common)
    across = sim.simulate_training_step(sim.LLAMA3_8B, cluster, placement=("dp", "cp", "tp", "pp"), **common)
    # rail-optimised nodes: a TP group of 4 GPUs per node crosses on 4 NICs, still well below NVLink
    assert across.step_time > 1.2 * inside.step_time
    assert across.peak_memory == inside.peak_memory


def test_published_llama3_layout_fits_only_with_full_recompute_and_stage_0_overflows():
    cluster = sim.make_cluster(2048, 8)
    with pytest.raises(sim.OutOfMemoryError) as error:
        sim.simulate_training_step(sim.LLAMA3_405B, cluster, recompute="selective", **PUBLISHED)
    assert error.value.stage == 0
    one_f_one_b = sim.simulate_training_step(sim.LLAMA3_405B, cluster, recompute="full", **PUBLISHED)
    interleaved = sim.simulate_training_step(sim.LLAMA3_405B, cluster, recompute="full", virtual_stages=2,
                                             schedule="interleaved_1f1b", **PUBLISHED)
    published_mfu = 400e12 / cluster.preset.peak_flops   # Dubey et al. 2024, Table 4
    assert one_f_one_b.mfu < interleaved.mfu < published_mfu


def test_on_1024_gpus_most_layouts_do_not_fit_and_the_best_has_hundreds_of_micro_batches():
    cluster = sim.make_cluster(128, 8)
    rows = sim.search_layouts(sim.LLAMA3_405B, cluster, LLAMA_BATCH, zero_stages=(0, 1, 2, 3), cps=(1, 2),
                              micro_batch_sizes=(1, 2), simulate_top=0)
    assert sum(r["fits"] for r in rows) < len(rows) / 2
    assert rows[0]["microbatches"] >= 100
    assert rows[0]["mfu"] < cluster.preset.flops / cluster.preset.peak_flops
