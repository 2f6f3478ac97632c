"""What chapter 01's prose says, asserted (issue 41): section 4 derives the output layer only, the
exercise grades each gradient on its own, and the problems' answers are printed only on request."""

from __future__ import annotations

import json
from pathlib import Path

from course_lib.grading import instructor_checks

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "01_mlp_by_hand" / "01_mlp_by_hand.ipynb"


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text())["cells"]


def _text(fragment: str) -> str:
    [text] = ["".join(c["source"]) for c in _cells() if fragment in "".join(c["source"])]
    return text


def test_section_4_stops_after_the_output_layer():
    section = _text("## 4. The backward pass, on paper")
    assert r"G_{W_2} = G_{\hat Y}^\top H" in section
    for answer in (r"G_H = G_{\hat Y} W_2", r"G_Z = G_H \odot", r"G_{W_1} = G_Z^\top X", "G_X = G_Z W_1"):
        assert answer not in section, answer


def test_each_gradient_is_a_graded_part_with_its_points_in_the_notebook():
    graded = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
              for c in _cells() if c["metadata"].get("nbgrader", {}).get("grade")}
    assert graded == instructor_checks("ch01_mlp").POINTS
    assert set(graded) == {f"test_manual_backward_{name}" for name in ("W2", "b2", "W1", "b1", "x")}


def test_the_problems_answers_are_printed_only_on_request():
    [answers] = ["".join(c["source"]) for c in _cells() if c["id"] == "ch01-problems-answers"]
    assert answers.startswith("%%worked_answer\n")   # a button on Run All (course_lib.viz.worked_answer)


def test_section_8s_ratio_counts_attention_in_full_and_the_input_embedding_among_the_parameters():
    from course_lib.sim import LLAMA3_8B as llama

    section = _text("what the rule leaves out is attention over the sequence")
    assert "not halved for the causal mask" in section
    tokens = llama.seq_len
    assert round(llama.training_flops(tokens) / (6 * llama.num_params * tokens), 2) == 1.20
    assert round(llama.vocab_size * llama.hidden / 1e9, 1) == 0.5                # the input embedding


def test_the_16_bytes_a_parameter_are_named_as_zeros_accounting_beside_megatrons_18():
    """2 + 2 + 12 is ZeRO's count; Megatron-LM's table (16-bit weights, 32-bit gradients) counts 18."""
    text = _text("Memory comes in two kinds")
    assert 2 + 2 + 12 == 16 and 2 + 4 + 12 == 18
    assert "These 16 bytes are\nZeRO's accounting" in text and "counts 18" in text
    assert "https://github.com/NVIDIA/Megatron-LM/blob/main/docs/source/api-guide/dist_optimizer.md" in text
