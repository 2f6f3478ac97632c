"""run_ranks from inside a real Jupyter kernel, with the rank function defined in a notebook cell."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

CELLS = [
    # 0: a function defined in a cell, run on four ranks
    """import os, time, torch, torch.distributed as dist
from course_lib.real import run_ranks, RankFailure, RanksHungError
def total(rank, world_size):
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    print(f"sum is {t.item()}")
    return t.item()
print("results", run_ranks(total, 4))""",
    # 1: a rank-tagged exception
    """def broken(rank, world_size):
    if rank == 1:
        raise KeyError("missing")
    time.sleep(30)
try:
    run_ranks(broken, 2)
except RankFailure as failure:
    print("failed rank", failure.rank, "in broken:", "in broken" in failure.remote_traceback)""",
    # 2: the classic ring deadlock
    """def ring(rank, world_size):
    buffer = torch.zeros(1 << 18)
    dist.send(buffer, (rank + 1) % world_size)
    dist.recv(buffer, (rank - 1) % world_size)
started = time.monotonic()
try:
    run_ranks(ring, 2, timeout=2)
except RanksHungError as hang:
    print("hung after", round(time.monotonic() - started), "s")
    for rank, where in sorted(hang.blocked_at.items()):
        print("blocked", rank, where.split(": ", 1)[1])""",
    # 3: no rank left behind
    """children = [p for p in os.listdir("/proc") if p.isdigit() and
            open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())]
print("children left", len(children))""",
]


@pytest.mark.slow
def test_run_ranks_in_a_jupyter_kernel():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    NotebookClient(notebook, timeout=60, kernel_name="distributed-course").execute()
    outputs = ["".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
               for cell in notebook.cells]
    for rank in range(4):
        assert f"[rank {rank}] sum is 10.0" in outputs[0]
    assert "results [10.0, 10.0, 10.0, 10.0]" in outputs[0]
    assert "failed rank 1 in broken: True" in outputs[1]
    hung_after = int(outputs[2].split("hung after ")[1].split()[0])
    assert hung_after <= 2 + 5
    assert "blocked 0 dist.send(buffer, (rank + 1) % world_size)" in outputs[2]
    assert "blocked 1 dist.send(buffer, (rank + 1) % world_size)" in outputs[2]
    assert "children left 0" in outputs[3]
