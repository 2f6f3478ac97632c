"""What chapter 06's prose says after the 11-28 review, asserted: MFU defined where it is first printed,
the vocabulary as Llama 3's Table 3 prints it, torchtitan's async-TP switch at a pinned commit, Korthikanti's
Table 2 apart from the course's extension of it, and problem 2 counted with the simulator's own FLOPs.

Each claim names its public source; a claim about torch is checked against the installed torch's source.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import torch

from course_lib import sim

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "06_tensor_parallel" / "06_tensor_parallel.ipynb"
TORCH = Path(torch.__file__).parent

SOURCES = {
    "mfu": "https://arxiv.org/abs/2204.02311",                   # PaLM, appendix B: model FLOPs utilisation
    "llama3": "https://arxiv.org/abs/2407.21783",                # Table 3: vocabulary 128,000
    "llama3_config": "https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json",  # 128256
    "torchtitan": ("https://github.com/pytorch/torchtitan/blob/00aba2433b404f467dcd0cc3fae96c8f9ba55cfa/"
                   "torchtitan/distributed/compile.py"),        # _maybe_enable_async_tp
    "korthikanti": "https://arxiv.org/abs/2205.05198",           # Table 2: activations per layer
}


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def _text() -> str:
    return " ".join(" ".join(c.source for c in _cells() if c.cell_type == "markdown").split())


def test_every_source_named_here_is_a_public_url_the_chapter_cites():
    text = " ".join(c.source for c in _cells())
    for name, url in SOURCES.items():
        assert url.startswith("https://"), name
        if name != "korthikanti":          # the chapter cites Korthikanti by arXiv number
            assert url in text, name
    assert "arXiv:2205.05198" in text


def test_mfu_is_defined_before_the_first_cell_that_prints_it():
    """Review ch06 #1: MFU printed in [14] was defined only in chapter 08."""
    cells = _cells()
    first = next(i for i, c in enumerate(cells) if c.cell_type == "code" and "MFU" in c.source)
    before = " ".join(" ".join(c.source for c in cells[:first] if c.cell_type == "markdown").split())
    assert "*model FLOPs utilisation*" in before and SOURCES["mfu"] in before


def test_the_vocabulary_is_printed_as_table_3_prints_it_and_the_config_as_released():
    """Review ch06 #2: Table 3 prints 128,000; 128,256 is the released config (256 reserved tokens)."""
    text = _text()
    assert "a vocabulary of 128,000 tokens (Dubey et al. 2024" in text and "Table 3" in text
    assert "$V = 128256$ (Dubey et al. 2024, Table 3)" not in text
    assert 128_000 + 256 == 128_256 and "256 reserved special tokens" in text


def test_torchtitans_async_tp_is_cited_at_a_pinned_commit_and_torchs_switch_exists():
    """Review ch06 #3: `_maybe_enable_async_tp` now lives in torchtitan/distributed/compile.py; the switch it
    sets, torch._inductor.config._micro_pipeline_tp, is in the installed torch."""
    text = _text()
    assert "`_maybe_enable_async_tp`" in text and SOURCES["torchtitan"] in text
    assert "`maybe_enable_async_tp` in\n`torchtitan/distributed/tensor_parallel.py`" not in text
    config = (TORCH / "_inductor" / "config.py").read_text()
    assert "_micro_pipeline_tp: bool = False" in config
    assert (TORCH / "distributed" / "_symmetric_memory").is_dir()


def test_korthikantis_table_2_ratio_and_the_courses_extension_are_told_apart():
    """Review ch06 #5: with Table 2 the saving is (10 + 24/t) / (34/t) for any GPT-shaped model; the Llama
    rows come from the course's extension (GQA, gated MLP, no dropout)."""
    t = 8
    table_2 = (10 + 24 / t) / (34 / t)
    assert round(table_2, 2) == 3.06
    ratios = {}
    for model in (sim.GPT3_175B, sim.LLAMA3_70B):
        tp_only, with_sp = (sim.activation_memory_per_layer(model, 1, tp=t, sequence_parallel=sp,
                                                            recompute="selective") for sp in (False, True))
        ratios[model.name] = tp_only / with_sp
    assert math.isclose(ratios[sim.GPT3_175B.name], table_2, rel_tol=0.01)
    assert round(ratios[sim.LLAMA3_70B.name], 1) == 2.7 < table_2
    text = _text()
    assert "3.06x at $t = 8$ for any GPT-shaped model (Korthikanti's Table 2)" in text
    assert "the course's own extension of their count" in text and "by the course's extension" in text


def test_problem_2_counts_llamas_flops_with_the_simulators_own_count():
    """Review ch06 #6: the gated MLP and grouped-query attention, not GPT's 24bsh^2(1 + s/6h)."""
    problem = next(c.source for c in _cells()
                   if c.source.startswith("%%worked_answer\nmodel, t = LLAMA3_70B, 8"))
    assert "model_flops(model, model.seq_len)" in problem and "24 * model.seq_len" not in problem
    model = sim.LLAMA3_70B
    gpt_count = 3 * 24 * model.seq_len * model.hidden**2 * (1 + model.seq_len / (6 * model.hidden))
    assert sim.model_flops(model, model.seq_len) / model.layers > gpt_count     # the wider, gated MLP


def test_sequence_parallel_uses_torch_2_13s_collective_names():
    """The SP cells use all_gather_single / reduce_scatter_single, which the installed torch defines
    (https://pytorch.org/docs/stable/distributed.html)."""
    c10d = (TORCH / "distributed" / "distributed_c10d.py").read_text()
    assert "def all_gather_single(" in c10d and "def reduce_scatter_single(" in c10d
    source = " ".join(c.source for c in _cells())
    assert "all_gather_into_tensor(" not in source and "reduce_scatter_tensor(" not in source


def test_the_compute_rate_is_the_measured_gemm_not_an_assumed_75_percent():
    """Review ch06 #4: the rate is MEASURED_GEMM (device, date and script named), printed as measured
    (NVIDIA's H100 data sheet gives the 989 TFLOP/s dense BF16 peak:
    https://www.nvidia.com/en-us/data-center/h100/)."""
    from course_lib.sim.cluster.presets import MEASURED_GEMM

    assert MEASURED_GEMM.flops == sim.H100.flops == 710e12 and MEASURED_GEMM.peak_flops == 989e12
    text = _text()
    assert "median 710 of 989 TFLOP/s" in text and "`MEASURED_GEMM`" in text
    assert "75% of the H100's dense BF16 peak (a large GEMM's efficiency)" not in text
