"""Parameter counts and training FLOPs against the standard formulas and published sizes."""

import pytest

from course_lib.sim import COURSE_MLP, GPT3_175B, LLAMA3_8B, LLAMA3_70B, LLAMA3_405B, MLPSpec, TransformerSpec


def test_gpt_parameter_formula_of_narayanan_et_al():
    m = GPT3_175B
    layers, h, v, s = m.layers, m.hidden, m.vocab_size, m.seq_len
    formula = 12 * layers * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * layers * h))
    assert m.num_params == pytest.approx(formula + 2 * h)   # + the final LayerNorm
    assert m.num_params / 1e9 == pytest.approx(175, rel=0.01)


def test_training_flops_match_72bslh2():
    m = TransformerSpec(24, 1024, 16, 1024, 50000)
    b, layers, h, s, v = 8, 24, 1024, 1024, 50000
    formula = 72 * b * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    assert m.training_flops(b * s) == pytest.approx(formula)


def test_llama3_sizes_are_the_published_ones():
    assert LLAMA3_8B.num_params == 8_030_261_248
    assert LLAMA3_70B.num_params / 1e9 == pytest.approx(70.55, abs=0.01)
    assert LLAMA3_405B.num_params / 1e9 == pytest.approx(405.85, abs=0.01)


def test_course_mlp():
    assert COURSE_MLP.num_params == 6 * 4 + 4 + 4 * 2 + 2
    assert COURSE_MLP.training_flops(32) == 6 * (24 + 8) * 32


@pytest.mark.parametrize("kwargs,match", [
    (dict(layers=-1), "layers"),
    (dict(hidden=1000, heads=3), "multiple of heads"),
    (dict(kv_heads=3), "kv_heads"),
])
def test_bad_specs(kwargs, match):
    args = dict(layers=2, hidden=64, heads=4, seq_len=16, vocab_size=100) | kwargs
    with pytest.raises(ValueError, match=match):
        TransformerSpec(**args)
    with pytest.raises(ValueError, match="sizes"):
        MLPSpec((6,))
