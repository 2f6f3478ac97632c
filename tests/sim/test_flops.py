"""FLOP-counting conventions (sim/job/flops.py): model FLOPs as PaLM counts them, hardware FLOPs with
recomputation, Megatron-LM 2021's eq. (3), and the conversions between them."""

import pytest

from course_lib import sim
from course_lib.sim.job.flops import (
    attention_flops,
    hardware_flops,
    megatron_2021_flops,
    model_flops,
    utilization,
)
from course_lib.sim.search.published import MEGATRON_1T


def test_model_flops_are_6_per_matrix_parameter_plus_12_l_h_s_per_token():
    model = sim.TransformerSpec(2, 64, 4, 128, 1000, tied_embeddings=False, bias=False)
    matrices = model.layers * (model.attention_matrix_params + model.mlp_matrix_params) + 64 * 1000
    per_token = 6 * matrices + 12 * model.layers * model.hidden * model.seq_len
    assert model_flops(model, 1) == pytest.approx(per_token)
    assert attention_flops(model, 1) == 12 * 2 * 64 * 128


def test_counting_causal_attention_at_half_takes_half_the_scores_off():
    model = sim.LLAMA3_405B
    assert model_flops(model, 10) - model_flops(model, 10, "causal half") == pytest.approx(
        attention_flops(model, 10) / 2)
    with pytest.raises(ValueError, match="attention"):
        model_flops(model, 1, attention="half")


def test_full_recomputation_is_megatrons_hardware_count_and_4_thirds_of_the_model_flops():
    tokens = MEGATRON_1T.seq_len
    full = hardware_flops(MEGATRON_1T, tokens, "full")
    assert full == pytest.approx(4 / 3 * model_flops(MEGATRON_1T, tokens))
    assert hardware_flops(MEGATRON_1T, tokens, "full") == pytest.approx(megatron_2021_flops(MEGATRON_1T, 1),
                                                                       rel=1e-3)
    assert hardware_flops(MEGATRON_1T, tokens, "none") == model_flops(MEGATRON_1T, tokens)


def test_megatrons_163_tflops_with_recompute_are_39_percent_mfu():
    model_rate = 163e12 * model_flops(MEGATRON_1T, 2048) / megatron_2021_flops(MEGATRON_1T, 1)
    assert round(100 * utilization(163e12, 312e12)) == 52           # as the paper prints it (HFU)
    assert round(100 * utilization(model_rate, 312e12)) == 39        # MFU
    with pytest.raises(ValueError):
        utilization(1e12, 0)
