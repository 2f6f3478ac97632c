"""What chapter 09's prose says about the course's own Slurm scripts stays true of them: the table of
#SBATCH options, the srun/torchrun flags it explains, and that the scripts set no NCCL variable but
NCCL_DEBUG (from COURSE_NCCL_DEBUG)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "notebooks" / "09_on_the_cluster" / "09_on_the_cluster.ipynb"
SLURM = ROOT / "slurm"
pytestmark = pytest.mark.skipif(not SLURM.is_dir(), reason="this copy of the course has no slurm/ folder")


def markdown() -> str:
    cells = json.loads(CHAPTER.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_the_option_table_lists_exactly_the_scripts_sbatch_lines():
    script = (SLURM / "bus_bandwidth.sbatch").read_text()
    in_script = set(re.findall(r"^#SBATCH (--\S+)", script, re.M))
    in_table = set(re.findall(r"^\| `(--[^`]+)` \|", markdown(), re.M))
    assert in_table == in_script, f"table {sorted(in_table)} vs script {sorted(in_script)}"


@pytest.mark.parametrize("flag", ["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--rdzv-backend=c10d",
                                  "--max-restarts=0", "-m course_lib.dist.launch"])
def test_the_launch_line_the_chapter_explains_is_the_one_in_course_env(flag):
    assert flag in (SLURM / "course_env.sh").read_text() and flag.split("=")[0] in markdown()


def assigned_nccl_variables(text: str, commented: bool) -> set[str]:
    prefix = r"^\s*#\s*(?:export\s+)?" if commented else r"^\s*(?:export\s+)?"
    return set(re.findall(prefix + r"(NCCL_\w+)=", text, re.M))


def test_the_scripts_set_no_nccl_variable_but_nccl_debug_and_the_site_template_only_suggests_some():
    texts = {path.name: path.read_text() for path in [*SLURM.glob("*.sbatch"), *SLURM.glob("*.sh")]}
    assigned = set().union(*(assigned_nccl_variables(text, commented=False) for text in texts.values()))
    assert assigned == {"NCCL_DEBUG"}, assigned
    assert 'export NCCL_DEBUG="$COURSE_NCCL_DEBUG"' in texts["course_env.sh"]
    suggested = assigned_nccl_variables(texts["site.example.sh"], commented=True)
    assert suggested and suggested <= {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"}, suggested
