"""Chapter 07's statements the 11-28 review flagged, each held to the notebook's text and to its source:
the installed torch 2.13 where the claim is about torch, the paper or the simulator otherwise.

Sources: ZeRO, Rajbhandari et al. 2020, https://arxiv.org/abs/1910.02054 (sections 5.2 and 7.2.1);
FSDP2's fully_shard, https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html;
Megatron-Core's overlap_param_gather, https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/core/
distributed/distributed_data_parallel_config.py; torch.utils.checkpoint,
https://docs.pytorch.org/docs/stable/checkpoint.html.
"""

from __future__ import annotations

import pathlib
import re

import nbformat
import torch
from torch import nn

from course_lib import sim
from course_lib.grading.checks.ch07_zero.probes import LiveTensorBytes
from course_lib.models import TransformerBlock
from course_lib.real.record import traffic_log

REPO = pathlib.Path(__file__).resolve().parents[2]
CELLS = [c.source for c in nbformat.read(REPO / "solutions" / "07_zero_fsdp" / "07_zero_fsdp.ipynb",
                                         as_version=4).cells]
TEXT = "\n".join(CELLS)
TORCH = pathlib.Path(torch.__file__).parent


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_states_the_prose_names_are_the_ones_printed():
    states = sim.zero_memory_per_device(sim.LLAMA3_8B.num_params, dp_degree=1, stage=0, grad_bytes=4)
    assert f"the {states / 1e9:.0f} GB\nof states" in TEXT and "144 GB" not in TEXT


def test_what_the_blocks_keep_beside_the_formula_is_logsumexp_and_layernorm_statistics():
    """The 0.8% left over: a float32 logsumexp per (query row, head) and two LayerNorms' mean and rstd."""
    layers, batch, seq, dim, heads, ffn = 4, 4, 64, 64, 4, 256    # cell 8's blocks
    torch.manual_seed(0)
    blocks = nn.ModuleList(TransformerBlock(dim, heads, ffn) for _ in range(layers))
    x = torch.randn(batch, seq, dim, requires_grad=True)
    with LiveTensorBytes() as probe:
        y = x
        for block in blocks:
            y = block(y)
        loss = y.square().mean()
        held = probe.live()
    spec = sim.TransformerSpec(layers, dim, heads, seq, vocab_size=1, ffn_hidden=ffn, dropout=False)
    formula = 2 * layers * sim.activation_memory_per_layer(spec, batch)
    per_layer = batch * heads * seq * 4 + 2 * batch * seq * 8     # logsumexp + two norms' (mean, rstd)
    assert held - formula == layers * per_layer + loss.element_size()   # and the loss itself
    assert sum(isinstance(m, nn.LayerNorm) for m in blocks[0].modules()) == 2
    q = torch.randn(batch, heads, seq, dim // heads, requires_grad=True)
    saved = torch.nn.functional.scaled_dot_product_attention(q, q, q).grad_fn._saved_logsumexp
    assert saved.dtype == torch.float32 and tuple(saved.shape) == (batch, heads, seq)
    assert "one 4-byte float32 per query row and head" in _flat(CELLS[10]) and "8 bytes per query" not in TEXT


def test_recompute_explains_why_the_step_is_not_4_3_and_predicts_with_the_machines_forward():
    prose = _flat(CELLS[10])
    assert "less than twice the forward" in prose and "non-reentrant" in prose
    assert "recomputed, plain + forward" in CELLS[11]             # the prediction the cell prints
    summary = _flat(CELLS[-1] if "What you have seen" in CELLS[-1] else CELLS[-2])
    assert "4/3 of the step by the FLOPs on large blocks" in summary
    assert "use_reentrant=False" in CELLS[8]
    source = (TORCH / "utils" / "checkpoint.py").read_text()
    assert "def _checkpoint_without_reentrant_generator" in source   # the saved-tensor hooks path


def test_zero_proper_is_cited_by_its_sections():
    assert "sections 5.2 and 7.2.1" in TEXT and "ZeRO proper (section 4)" not in TEXT


def test_fsdp2_overlaps_the_forward_gathers_by_default_as_its_docstring_says():
    docstring = _flat((TORCH / "distributed" / "fsdp" / "_fully_shard" / "_fully_shard.py").read_text())
    quoted = ("gives the same all-gather overlap behavior as the default overlap behavior, except the "
              "prefetched all-gather is issued earlier from the CPU")
    assert quoted in docstring
    prose = _flat(CELLS[45])
    assert quoted in prose
    assert "only when asked for" not in prose and "overlaps by default" in prose


def test_the_recorder_names_the_single_calls_by_their_collectives_older_names():
    assert traffic_log._GROUP_METHODS["all_gather_single"] == "all_gather_into_tensor"
    assert traffic_log._GROUP_METHODS["reduce_scatter_single"] == "reduce_scatter_tensor"
    c10d = (TORCH / "distributed" / "distributed_c10d.py").read_text()
    assert "group.all_gather_single(output_tensor, input_tensor, opts)" in c10d
    assert "`torch.distributed.all_gather_into_tensor` is deprecated" in c10d
    assert "_GROUP_METHODS" in CELLS[45]


def test_the_first_fsdp_unit_is_the_embedding_and_layer_0_as_printed():
    llama = sim.LLAMA3_8B
    dgx = sim.make_cluster(nodes=4, gpus_per_node=8)
    report = sim.simulate_training_step(llama, dgx, dp=32, zero_stage=3, microbatches=1, recompute="full",
                                        check_memory=False)
    first = next(e for e in report.timeline.events(0) if e.label.startswith("F0 FSDP all-gather L0 "))
    megabytes = float(re.search(r"\(([\d.e+]+) MB", first.label).group(1))
    assert abs(megabytes * 1e6 - 2 * (llama.vocab_size * llama.hidden + llama.params_per_layer)) < 1e7
    assert "the embedding and layer 0" in _flat(CELLS[59]) and "1.5 GB" not in CELLS[59]
    assert "F0 FSDP all-gather L0" in CELLS[60]


def test_stage_3_beats_stage_1_with_one_microbatch_only_without_the_overlapped_parameter_gather():
    dgx = sim.make_cluster(nodes=4, gpus_per_node=8)
    common = dict(dp=32, microbatches=1, recompute="full", check_memory=False)
    one, three = (sim.simulate_training_step(sim.LLAMA3_8B, dgx, zero_stage=s, **common) for s in (1, 3))
    overlapped = sim.simulate_training_step(sim.LLAMA3_8B, dgx, zero_stage=1, overlap_param_gather=True,
                                            **common)
    assert three.step_time < one.step_time and overlapped.step_time < three.step_time
    assert "overlap_param_gather=True" in CELLS[59] and "overlap_param_gather=False" in CELLS[59]


def test_problem_5_uses_the_measured_h100_rate_and_its_answer_is_more_than_one_8k_sequence():
    """The chapter's H100 runs at the measured 710 TFLOP/s (sim.H100.flops), not the older 742 (the 12-07
    review): the answer, (N-1)/N F/B tokens, still needs two 8K sequences."""
    assert "742" not in TEXT
    [answer] = [cell for cell in CELLS if cell.startswith("%%worked_answer") and "answer_5" in cell]
    assert "answer_5 = (63 / 64) * sim.H100.flops / 50e9" in answer
    tokens = (63 / 64) * sim.H100.flops / 50e9
    assert 8192 < tokens <= 2 * 8192
