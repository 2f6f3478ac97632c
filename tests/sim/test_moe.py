"""Mixtures of experts in the simulator: the MoESpec's sizes, the expert all-to-all on the network model,
expert parallelism in a training step, and DeepSeek-V3 as a published run (sim/search/published.py)."""

import dataclasses

import pytest

from course_lib import sim
from course_lib.sim.job.config import make_config
from course_lib.sim.step.costs import CostModel
from course_lib.sim.step.expert_costs import expert_times

D = sim.DEEPSEEK_V3
SMALL = sim.MoESpec(4, 256, 8, 128, 1000, gated_mlp=True, bias=False, experts=16, active_experts=2,
                    expert_ffn=128, shared_experts=1, dense_layers=1, name="small MoE")


def test_deepseek_v3_has_its_published_671b_and_37b():
    # DeepSeek-AI 2024, arXiv 2412.19437, section 4.2: 671B parameters, 37B activated per token.
    assert D.num_params == pytest.approx(671e9, rel=1e-3)
    assert 37e9 <= D.active_params < 38e9
    # One MLA by hand: W_DQ 7168x1536, W_UQ 1536x128x192, W_DKV+W_KR 7168x576, W_UKV 512x128x256,
    # W_O 128x128x7168, and the two RMSNorm scales (1536 + 512).
    assert D.attention_matrix_params == (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                                         + 128 * 128 * 7168 + 1536 + 512)
    assert D.expert_params == 3 * 7168 * 2048 and D.router_params == 7168 * 256


def test_an_moe_layer_stores_all_experts_and_runs_k_plus_shared():
    moe, dense = SMALL.layer_params(1), SMALL.layer_params(0)
    assert moe - SMALL.layer_active_params(1) == (16 - 2) * SMALL.expert_params
    assert SMALL.layer_expert_params(0) == 0 and SMALL.layer_expert_params(1) == 16 * SMALL.expert_params
    attention, mlp = SMALL.layer_forward_flops(10, 1)
    assert mlp == 2 * 10 * (SMALL.router_params + 3 * SMALL.expert_params)
    assert SMALL.layer_forward_flops(10, 0)[1] == 2 * 10 * SMALL.mlp_matrix_params
    assert dense == SMALL.params_per_layer
    # qk and v widths of h/heads give back the standard attention core, 4 s h per token
    assert SMALL.attention_core_flops(1) == 4 * SMALL.seq_len * SMALL.hidden


BAD_SHAPES = [(dict(active_experts=20), "cannot exceed"), (dict(dense_layers=4), "at least one"),
              (dict(experts=0), "experts"), (dict(expert_ffn=0), "expert_ffn")]


@pytest.mark.parametrize("fields, message", BAD_SHAPES)
def test_bad_moe_shapes_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SMALL, **fields)


def test_plain_dispatch_is_the_pairwise_all_to_all_and_sends_k_copies():
    link = sim.make_cluster(8, 8, preset="h800").group_link(range(64))
    traffic = sim.expert_traffic(4096, 7168, 8, 64, link, bytes_per_element=2)
    pairs = 4096 * 8 * 7168 * 2
    assert traffic.nic_bytes == pytest.approx(pairs * 56 / 64)
    assert traffic.nvlink_bytes == pytest.approx(pairs * 7 / 64)
    assert sim.expert_all_to_all_time(4096, 7168, 8, 64, link) == pytest.approx(
        sim.collective_time("all_to_all", pairs, 64, link, "pairwise"))
    assert sim.expert_all_to_all_time(4096, 7168, 8, 1, link) == 0.0


def test_node_limited_dispatch_sends_each_token_once_per_node():
    link = sim.make_cluster(8, 8, preset="h800").group_link(range(64))
    limited = sim.expert_traffic(1, 7168, 8, 64, link, node_limit=4, bytes_per_element=1)
    assert limited.nic_bytes == pytest.approx(4 * 7 / 8 * 7168)          # 3.5 remote nodes per token
    assert limited.nvlink_bytes == pytest.approx(8 * 7 / 8 * 7168)       # forwarded inside each node
    # The report's 3.2 experts per node (section 3.2.2): with NVLink 3.2x InfiniBand, forwarding 3.2
    # experts per reached node takes exactly as long as the InfiniBand hop.
    per_token_ib = limited.nic_bytes / 50e9
    per_expert_nvlink = limited.nvlink_bytes / 8 / 160e9
    assert 4 * per_expert_nvlink * 3.2 == pytest.approx(per_token_ib)
    # 3.5 InfiniBand copies of each token instead of 8 x 56/64 = 7: the dispatch takes half as long
    plain = sim.expert_all_to_all_time(4096, 7168, 8, 64, link, bytes_per_element=1)
    limited_time = sim.expert_all_to_all_time(4096, 7168, 8, 64, link, node_limit=4, bytes_per_element=1)
    assert limited_time == pytest.approx(plain / 2, rel=0.01)


def test_ep_must_fit_the_layout():
    for options, message in [(dict(dp=8, ep=3), "divide dp"), (dict(dp=8, ep=8, tp=1), None),
                             (dict(dp=4, tp=2, ep=2), "tp=1"),
                             (dict(dp=8, ep=8, expert_imbalance=9), "between")]:
        world = options.get("dp", 1) * options.get("tp", 1)
        if message is None:
            make_config(SMALL, world, **options)
        else:
            with pytest.raises(ValueError, match=message):
                make_config(SMALL, world, **options)
    with pytest.raises(ValueError, match="MoESpec"):
        make_config(sim.LLAMA3_8B, 8, dp=8, ep=8)
    with pytest.raises(ValueError, match="divide the 12 routed experts"):
        make_config(dataclasses.replace(SMALL, experts=12), 16, dp=16, ep=16)


def _step(**options):
    cluster = sim.make_cluster(2, 8, preset="h800")
    return sim.simulate_training_step(SMALL, cluster, dp=16, global_batch=16, microbatches=1, **options)


def test_expert_parallel_all_to_alls_show_in_the_timeline_and_cost_time():
    plain, spread = _step(), _step(ep=16)
    labels = {e.label for e in spread.timeline.events(0)}
    assert any("EP dispatch all-to-all" in label for label in labels)
    assert any("EP combine all-to-all" in label for label in labels)
    assert spread.step_time > plain.step_time
    assert not any("EP" in e.label for e in plain.timeline.events(0))


def test_overlap_hides_what_fits_behind_compute():
    cluster = sim.make_cluster(2, 8, preset="h800")
    config = make_config(SMALL, 16, dp=16, ep=16, ep_overlap=True, global_batch=16)
    costs = CostModel(config, cluster)
    times, block = expert_times(costs, 1), costs.pieces[0][1]
    exposed = _step(ep=16).step_time
    hidden = _step(ep=16, ep_overlap=True).step_time
    assert hidden < exposed
    communication = times.forward_comm + times.backward_comm
    assert block.fwd_time + block.bwd_time >= communication   # stretched where they do not fit


def test_imbalance_slows_the_busiest_rank_and_fp8_speeds_the_matmuls():
    balanced, skewed = _step(ep=16), _step(ep=16, expert_imbalance=4.0)
    assert skewed.step_time > balanced.step_time
    assert _step(fp8=True).step_time < _step().step_time
    with pytest.raises(ValueError, match="FP8"):
        sim.simulate_training_step(SMALL, sim.make_cluster(1, 8), dp=8, fp8=True)


def test_experts_spread_over_ep_ranks_leave_less_on_each():
    model = dataclasses.replace(D, layers=8, dense_layers=1)
    alone = sim.memory_per_device(model, dp=64, ep=1, zero_stage=1, global_batch=64)
    spread = sim.memory_per_device(model, dp=64, ep=64, zero_stage=1, global_batch=64)
    assert spread[0].parameters < alone[0].parameters / 10
    expert_share = sum(model.layer_expert_params(i) for i in range(8))
    assert alone[0].parameters - spread[0].parameters == pytest.approx(expert_share * (1 - 1 / 64) * 2)


RUN = sim.DEEPSEEK_V3_RUN


def test_the_deepseek_run_is_the_reports_layout():
    layout = RUN.layout
    assert layout["dp"] * layout["pp"] == RUN.gpus == 2048 and layout["ep"] == 64
    assert layout["global_batch"] * D.seq_len == 15360 * 4096           # section 4.2
    assert sum(layout["stage_layers"]) == D.layers
    assert RUN.published_gpu_hours_per_trillion_tokens == 180e3        # Table 1: 2,664K for 14.8T
    assert 2664e3 / 14.8 == pytest.approx(180e3, rel=0.001)
    # 180K GPU-hours per trillion tokens are 1,543 tokens per GPU-second, 45.5% of the BF16 peak: derived
    assert RUN.paper_mfu is None and RUN.paper_tflops is None                # the report prints neither
    assert sim.mfu_from_gpu_hours(180e3, D, 989e12) == pytest.approx(RUN.derived_mfu)
    assert RUN.derived_mfu == pytest.approx(0.455, abs=0.001) and "derived" in RUN.derivation


def test_deepseek_v3_comes_within_20_to_35_percent_of_its_gpu_hours_still_optimistic():
    # Known gap (chapter 11 prints it and says why): the simulator is about 28% faster than the report,
    # outside the chapter's 25% goal; the FP8 matrix multiplies at 75% of their peak are the first suspect.
    report = sim.simulate_published(RUN)
    gap = sim.gpu_hours_per_trillion_tokens(report) / RUN.published_gpu_hours_per_trillion_tokens - 1
    assert -0.35 < gap < -0.20, gap


def test_the_deepseek_split_is_the_most_even_one():
    runs = {split: sim.simulate_published(dataclasses.replace(RUN, layout=dict(RUN.layout,
                                                                             stage_layers=split)))
            for split in (RUN.layout["stage_layers"], None, (4,) * 14 + (3, 2), (4,) * 13 + (3, 3, 3))}
    best = min(runs, key=lambda split: runs[split].step_time)
    assert best == RUN.layout["stage_layers"]


def test_the_layer_timeline_waits_for_the_busiest_rank():
    link = sim.Link(latency=1e-4, bandwidth=1e9)
    balanced = [[10, 10], [10, 10]]
    skewed = [[18, 2], [18, 2]]                 # rank 0's experts get 36 rows, rank 1's 4
    fast = sim.expert_layer_timeline(balanced, 64, 1e6, 1e9, link)
    slow = sim.expert_layer_timeline(skewed, 64, 1e6, 1e9, link)
    # forward 1x and backward 2x the experts' work, each waiting for the busiest rank: 3 x 36 ms against
    # 3 x 20 ms; and each of the 4 all-to-alls now waits for rank 1's 18 rows to rank 0 (10 before)
    assert slow.makespan - fast.makespan == pytest.approx(3 * (36 - 20) * 1e-3 + 4 * 8 * 64 * 4 / 1e9)
    busy = [sum(e.end - e.start for e in slow.events(r) if e.kind == "compute") for r in range(2)]
    assert busy[0] == pytest.approx(3 * 36e-3) and busy[1] == pytest.approx(3 * 4e-3)
    with pytest.raises(ValueError, match="N x N"):
        sim.expert_layer_timeline([[1, 2]], 64, 1e6, 1e9, link)


def test_the_layer_timeline_on_shared_cores_with_each_ranks_rate_and_the_rest_of_the_layer():
    link = sim.Link(latency=1e-4, bandwidth=1e9)
    skewed = [[18, 2], [18, 2]]                 # rank 0's experts get 36 rows, rank 1's 4
    own = sim.expert_layer_timeline(skewed, 64, 1e6, [1e9, 2e9], link, other_seconds=(1e-3, 2e-3))
    # a device each: the rest of the layer charged once per pass on every rank, each rank at its own rate
    busy = [sum(e.end - e.start for e in own.events(r) if e.kind == "compute") for r in range(2)]
    assert busy[0] == pytest.approx(3 * 36e-3 + 3e-3) and busy[1] == pytest.approx(3 * 2e-3 + 3e-3)
    labels = {e.label for e in own.events(0)}
    assert "router (besides the experts)" in labels and "combine bookkeeping (besides the experts)" in labels
    # both ranks on one core: the rest of the layer takes twice as long (both compute it at once); the
    # experts' pass takes rank 1's work twice (shared) and then rank 0's remainder alone: work0 + work1
    shared = sim.expert_layer_timeline(skewed, 64, 1e6, [1e9, 2e9], link, other_seconds=(1e-3, 2e-3), cores=1)
    assert shared.makespan - own.makespan == pytest.approx(3e-3 + 3 * 2e-3)
    # two cores for two ranks share nothing
    assert sim.expert_layer_timeline(skewed, 64, 1e6, [1e9, 2e9], link, other_seconds=(1e-3, 2e-3),
                                     cores=2).makespan == pytest.approx(own.makespan)
    for bad in ({"flops": [1e9]}, {"other_seconds": (1e-3,)}, {"cores": 0}):
        arguments = {"flops": 1e9, **bad}
        with pytest.raises(ValueError):
            sim.expert_layer_timeline(skewed, 64, 1e6, arguments.pop("flops"), link, **arguments)
