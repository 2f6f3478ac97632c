"""A run that survives preemption: FSDP2 training that saves with DCP, stops cleanly on SIGTERM, and resumes.

Every ``save_every`` steps, and at once when SIGTERM arrives (what slurm/preemptible.sbatch sends the ranks
when Slurm warns it with ``--signal=B:USR1@...``), the ranks agree to save: DCP writes each rank's shards
into a new folder and its ``.metadata`` file last, through a rename, so a folder is a checkpoint only once
``.metadata`` is in it. The next run (the same job, requeued) loads the newest one, on any number of ranks.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from course_lib.examples._common import finish, positive_int, require_divisible

BATCH, WIDTH = 16, 32
STEPS, SAVE_EVERY = 20, 5


def make_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of a step, the same wherever and whenever the step runs."""
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(BATCH, WIDTH, generator=generator)
    return inputs, inputs[:, :4].sin()


def newest_checkpoint(folder: Path) -> Path | None:
    """The newest folder holding a whole DCP checkpoint (its .metadata is written last)."""
    done = sorted(p.parent for p in folder.glob("step-*/.metadata")) if folder.is_dir() else []
    return done[-1] if done else None


def save(model, optimizer, step: int, folder: Path) -> None:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state, "step": step},
             checkpoint_id=folder / f"step-{step:06d}")


def resume(model, optimizer, folder: Path) -> int:
    """Load the newest whole checkpoint into model and optimizer; the step it holds (0: none)."""
    newest = newest_checkpoint(folder)
    if newest is None:
        return 0
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state, "step": 0}
    dcp.load(state, checkpoint_id=newest)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return state["step"]


def default_folder() -> Path:
    run_dir = os.environ.get("COURSE_RUN_DIR")
    if not run_dir:
        raise ValueError("give the checkpoint folder as the 4th argument (or run under "
                         "slurm/preemptible.sbatch, which sets COURSE_RUN_DIR)")
    return Path(run_dir) / "checkpoints"


def main(rank: int, world_size: int, steps=STEPS, save_every=SAVE_EVERY, step_seconds=0.0,
         folder=None) -> dict:
    steps, save_every = positive_int(steps, "steps"), positive_int(save_every, "save_every")
    require_divisible(world_size, BATCH, f"the batch of {BATCH} samples")
    folder = Path(folder) if folder else default_folder()
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = resumed_from = resume(model, optimizer, folder)
    if rank == 0:
        print(f"resumed from step {step}" if step else "starting from step 0", flush=True)
    rows = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
    while step < steps:
        inputs, targets = batch(step)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(inputs[rows]), targets[rows]).backward()
        optimizer.step()
        step += 1
        time.sleep(float(step_seconds))      # stands in for a longer step, so that a signal finds it running
        stopping = torch.tensor([float(bool(stop))])
        dist.all_reduce(stopping, op=dist.ReduceOp.MAX)    # every rank stops after the same step
        if step % save_every == 0 or step == steps or stopping.item():
            save(model, optimizer, step, folder)
        if stopping.item():
            break
    with torch.no_grad():
        inputs, targets = batch(10_000)
        final_loss = nn.functional.mse_loss(model(inputs), targets).item()
    return finish("preemptible", steps, final_loss if step == steps else None, resumed_from=resumed_from,
                  stopped_at=step, checkpoint=str(newest_checkpoint(folder)))
