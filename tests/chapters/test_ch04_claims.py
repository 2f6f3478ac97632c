"""What chapter 04's prose says, asserted: each stage's memory and how many stages a 70 B model needs, the
uneven split of its CPU model and what that costs once micro-batches flow, the bytes crossing a stage."""

from __future__ import annotations

import math

import pytest

from course_lib import sim

DEEP_WIDTHS = (256, 1024, 1024, 1024, 1024, 256)
SPLIT = (1, 1, 1, 2)            # stage_of's split of the 5 layers over 4 stages: the last gets the extra


def _stage_params(widths=DEEP_WIDTHS, split=SPLIT):
    layers = [a * b + b for a, b in zip(widths[:-1], widths[1:], strict=True)]
    bounds = [sum(split[:s]) for s in range(len(split) + 1)]
    return [sum(layers[bounds[s]:bounds[s + 1]]) for s in range(len(split))]


def _fits(stages: int) -> bool:
    return all(m.fits for m in sim.memory_per_device(sim.LLAMA3_70B, pp=stages, recompute="selective",
                                                     preset="h100"))


def test_70_b_parameters_of_model_state_need_15_stages_of_76_gb_usable_and_the_simulators_llama_27():
    """Problem 3 plans with the 76 GB the simulator plans with (chapters 03 and 05 too), not 80: 15 stages."""
    state = sim.zero_memory_per_device(70e9, 1, stage=0)
    assert state == 16 * 70e9 and math.ceil(state / sim.H100.usable_memory) == 15
    assert sim.memory_per_device(sim.LLAMA3_70B, pp=27, preset="h100")[0].capacity == sim.H100.usable_memory
    assert not any(_fits(p) for p in (1, 2, 8, 16, 26)) and _fits(27)
    # the fullest stage is an end stage: the last at 16 stages (output layer and logits), the first at 27
    for stages, fullest in ((16, 15), (27, 0)):
        memory = sim.memory_per_device(sim.LLAMA3_70B, pp=stages, recompute="selective", preset="h100")
        assert max(range(stages), key=lambda s: memory[s].total) == fullest


def test_the_cpu_models_stages_are_uneven_stage_0_a_quarter_of_stage_1():
    params = _stage_params()
    assert params == [263_168, 1_049_600, 1_049_600, 1_312_000]
    assert round(params[0] / params[1], 2) == 0.25
    held = sim.memory_per_device(sim.MLPSpec(DEEP_WIDTHS), pp=4, stage_layers=SPLIT, global_batch=32,
                                 param_bytes=4, grad_bytes=4, optimizer_bytes=0)
    assert [m.parameters / 4 for m in held] == params


def test_one_batch_at_a_time_an_uneven_split_changes_who_idles_not_how_much():
    times = [p / 1e6 for p in _stage_params()]
    played = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 4, 1), times, [2 * t for t in times])
    assert played.bubble_fraction == pytest.approx(sim.bubble_fraction_formula(4, 1))


def test_with_micro_batches_the_uneven_split_is_slower_and_its_light_stage_idles_most():
    params, micro = _stage_params(), 8
    total = 3 * sum(params)                             # forward + twice as long a backward
    runs = {}
    for name, shares in (("uneven", params), ("even", [1] * 4)):
        per_stage = [total * share / sum(shares) / micro for share in shares]
        runs[name] = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 4, micro),
                                           [t / 3 for t in per_stage], [2 * t / 3 for t in per_stage])
    assert runs["uneven"].makespan > 1.2 * runs["even"].makespan
    assert runs["even"].bubble_fraction == pytest.approx(sim.bubble_fraction_formula(4, micro))
    idle = [1 - sum(e.seconds for e in lane if e.kind == "compute") / runs["uneven"].makespan
            for lane in runs["uneven"].lanes]
    assert idle[0] == max(idle) and idle[3] == min(idle)


def test_a_stage_boundary_carries_134_mb_a_small_share_of_a_stages_forward_on_nvlink_and_infiniband():
    model, h100 = sim.LLAMA3_70B, sim.H100
    boundary = model.seq_len * model.hidden * 2
    assert round(boundary / 1e6) == 134
    forward = 2 * model.num_params / 16 * model.seq_len / h100.flops
    nvlink, infiniband = h100.intra_node.transfer_time(boundary), h100.inter_node.transfer_time(boundary)
    assert round(nvlink * 1e3, 2) == 0.30 and round(infiniband * 1e3, 2) == 2.70
    assert nvlink / forward < 0.005 and infiniband / forward < 0.03


# --- the 11-28 review's findings (activation count and 1F1B's memory: https://arxiv.org/abs/2205.05198) ---

def _ch04_text() -> str:
    from pathlib import Path

    import nbformat

    notebook = Path(__file__).resolve().parents[2] / "solutions" / "04_model_parallel"
    return " ".join(c.source for c in nbformat.read(str(notebook / "04_model_parallel.ipynb"),
                                                    as_version=4).cells)


def test_27_stages_hold_with_one_micro_batch_in_flight_and_none_fits_under_1f1b():
    """Review ch04 #1: under 1F1B stage 0 holds S micro-batches of L/S layers, the whole model's activations
    for one micro-batch (Korthikanti et al. 2022, section 4.2.3), however many stages."""
    held = []
    for stages in (16, 27, 80):
        memory = sim.memory_per_device(sim.LLAMA3_70B, pp=stages, recompute="selective", preset="h100",
                                       schedule="1f1b", microbatches=2 * stages)
        held.append(max(m.activations for m in memory))
        assert not all(m.fits for m in memory)
    whole = sim.LLAMA3_70B.layers * sim.activation_memory_per_layer(sim.LLAMA3_70B, 1, recompute="selective")
    assert all(abs(h - whole) < 0.02 * whole for h in held)
    text = _ch04_text()
    assert "One sequence *in flight*: naive model\nparallelism" in text
    assert "And under 1F1B (chapter 05)" in text


def test_the_activation_count_names_its_formula_and_flashattentions_effect():
    """Review ch04 #2: Korthikanti's Table 2, the course's extension, FlashAttention (no scores stored)."""
    fused = sim.activation_memory_per_layer(sim.LLAMA3_70B, 1)
    unfused = sim.activation_memory_per_layer(sim.LLAMA3_70B, 1, attention="unfused")
    assert round(unfused / fused) == 5
    text = _ch04_text()
    assert "https://arxiv.org/abs/2205.05198" in text and "https://arxiv.org/abs/2205.14135" in text
    assert "would multiply them by about 5" in text


def test_problem_4_says_what_its_flops_leave_out_and_the_megatron_pairing_is_named():
    """Review ch04 #3 and #7 (Megatron-LM: https://arxiv.org/abs/1909.08053, section 3)."""
    text = _ch04_text()
    assert "the\n   attention scores' own FLOPs not counted" in text
    assert "needs one all-reduce per MLP block, not one per layer (chapter 06)" in text


def _ch04_cells() -> dict[str, str]:
    import json
    from pathlib import Path

    chapter = Path(__file__).resolve().parents[2] / "solutions" / "04_model_parallel"
    cells = json.loads((chapter / "04_model_parallel.ipynb").read_text())["cells"]
    return {cell["id"]: "".join(cell["source"]) for cell in cells}


def test_the_utilisation_is_measured_on_equal_stages_as_the_1_over_s_law_assumes():
    """Review finding 4: rank 0's 6% showed the deeper model's uneven split more than the 1/S law; the
    measurement now runs 4 equal layers of 2048 x 2048, one a stage, and the cell asserts they are equal."""
    equal = (2048,) * 5
    assert _stage_params(equal, (1, 1, 1, 1)) == [2048 * 2048 + 2048] * 4
    cells = _ch04_cells()
    measuring = cells["50cc0a2c"]
    assert "EQUAL_WIDTHS = (2048,) * 5" in measuring and "len(set(stage_parameters)) == 1" in measuring
    assert "logs = [log for _, _, log in equal]" in measuring
    after = cells["c9adf2ad"]
    assert "the stages are not\nequal" not in after and "The stages hold equal parameters here" in after


@pytest.mark.parametrize("input_needs_gradient, backward_products", [(False, 1), (True, 2)])
def test_stage_0s_backward_does_half_the_matrix_products_its_input_being_data(input_needs_gradient,
                                                                             backward_products):
    """Why stage 0 of equal stages still computes less: with no gradient for its input, a linear layer's
    backward is the weight gradient's product alone (counted by torch's FlopCounterMode)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    layer, inputs = torch.nn.Linear(64, 64), torch.randn(8, 64, requires_grad=input_needs_gradient)
    output = layer(inputs)
    with FlopCounterMode(display=False) as counter:
        output.sum().backward()
    assert counter.get_total_flops() == backward_products * 2 * 8 * 64 * 64


def test_the_summary_prices_tensor_parallel_as_section_3_does():
    """The summary's cost of splitting every layer matches cell 25: an all-gather per split linear layer,
    or one all-reduce per MLP block with Megatron's pairing (the 12-07 review)."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "solutions" / "04_model_parallel" / "04_model_parallel.ipynb"
    [summary] = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                 if "".join(c["source"]).startswith("## What you have seen")]
    assert "one all-reduce per\n  MLP block" in summary and "a collective per layer." not in summary
