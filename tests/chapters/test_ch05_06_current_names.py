"""Chapters 05 and 06 use torch 2.13's current names: no deprecated collective in a code cell."""

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
# torch/distributed/distributed_c10d.py (2.13) marks these deprecated (FutureWarning), naming the new ones
DEPRECATED = {"all_gather_into_tensor(": "all_gather_single", "_all_gather_base(": "all_gather_single",
              "reduce_scatter_tensor(": "reduce_scatter_single",
              "_reduce_scatter_base(": "reduce_scatter_single"}


@pytest.mark.parametrize("chapter", ["05_pipeline_parallel", "06_tensor_parallel"])
def test_no_deprecated_collective_in_a_code_cell(chapter):
    cells = nbformat.read(str(ROOT / "solutions" / chapter / f"{chapter}.ipynb"), as_version=4).cells
    code = "\n".join(cell.source for cell in cells if cell.cell_type == "code")
    used = [f"{old[:-1]} (use {new})" for old, new in DEPRECATED.items() if old in code]
    assert not used, used


def test_the_replacements_exist_and_the_old_names_warn():
    import torch.distributed as dist

    for new in DEPRECATED.values():
        assert callable(getattr(dist, new)), new
    source = Path(dist.__file__).with_name("distributed_c10d.py").read_text()
    assert "`torch.distributed.all_gather_into_tensor` is deprecated" in source
    assert "`torch.distributed.reduce_scatter_tensor` is deprecated" in source
