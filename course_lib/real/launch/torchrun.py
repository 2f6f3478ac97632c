"""Cluster entry: ``python -m course_lib.real.launch.torchrun module:function [args...]`` under torchrun
or srun.

Reads the rank from torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or Slurm (SLURM_PROCID, SLURM_NTASKS,
SLURM_LOCALID), joins the group at MASTER_ADDR:MASTER_PORT and calls ``function(rank, world_size, *args)``:
the same function ``run_ranks`` runs in a notebook. Run alone, it is a one-rank world on this machine.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import re
import shutil
import socket
import subprocess
import sys
import traceback
from dataclasses import dataclass

from ..plumbing.backend import BACKENDS, gpu_count, pin_device, resolve_backend


@dataclass(frozen=True)
class RankEnvironment:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    source: str  # torchrun, slurm or single


def _integer(env, name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ValueError(f"environment variable {name}={env[name]!r} should be a whole number") from None


def _tasks_on_this_node(env) -> int:
    """Slurm writes tasks per node as "4", "4(x2)" or "4,3": the first count is this layout's typical node."""
    for name in ("SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        match = re.match(r"\d+", env.get(name, ""))
        if match:
            return int(match.group())
    return 1


def _first_slurm_host(env) -> str:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return "127.0.0.1"
    if shutil.which("scontrol"):
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=30).stdout.split()
        if hosts:
            return hosts[0]
    if "[" not in nodelist and "," not in nodelist:
        return nodelist
    raise RuntimeError(f"cannot tell the first node of {nodelist!r} without scontrol: export MASTER_ADDR")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_environment(env=None) -> RankEnvironment:
    """Where this process sits in the job, from torchrun's variables, else Slurm's, else a world of one."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world_size = _integer(env, "RANK"), _integer(env, "WORLD_SIZE")
        local_rank = _integer(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
        local_size = _integer(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world_size
        source = "torchrun"
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank, world_size = _integer(env, "SLURM_PROCID"), _integer(env, "SLURM_NTASKS")
        local_rank = _integer(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        local_size = _tasks_on_this_node(env)
        source = "slurm"
    else:
        return RankEnvironment(0, 1, 0, 1, "127.0.0.1", _free_port(), "single")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size} ranks: "
                         "check the launcher's variables")
    if "MASTER_ADDR" in env:
        address = env["MASTER_ADDR"]
    elif source == "slurm":
        address = _first_slurm_host(env)
    else:
        raise ValueError("MASTER_ADDR is not set: torchrun sets it; "
                         "with srun, export MASTER_ADDR=<first node>")
    if "MASTER_PORT" in env:
        port = _integer(env, "MASTER_PORT")
    elif source == "slurm" and "SLURM_JOB_ID" in env:
        port = 29500 + _integer(env, "SLURM_JOB_ID") % 10000  # as slurm/course_env.sh chooses it
    else:
        raise ValueError("MASTER_PORT is not set: export MASTER_PORT=<a free port on the first node>")
    return RankEnvironment(rank, world_size, local_rank, local_size, address, port, source)


def load_target(target: str):
    """``package.module:function`` -> the function, with a clear message for each way it can be wrong."""
    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"target must look like package.module:function, got {target!r} "
                         "(e.g. course_lib.examples.ddp:main)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(f"cannot import {module_name!r} ({error}); run from the course checkout or "
                         "put it on PYTHONPATH") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {function_name!r}")
    return function


def run_target(function, args, place: RankEnvironment, backend: str = "auto", timeout_s: float = 600):
    """Join the process group as ``place`` says, call ``function(rank, world_size, *args)``, leave."""
    import torch.distributed as dist

    os.environ.update(RANK=str(place.rank), WORLD_SIZE=str(place.world_size),
                      LOCAL_RANK=str(place.local_rank), LOCAL_WORLD_SIZE=str(place.local_world_size),
                      MASTER_ADDR=place.master_addr, MASTER_PORT=str(place.master_port))
    visible = gpu_count()
    if backend == "nccl" and place.source == "slurm" and visible == 1:
        # srun --gpus-per-task=1 shows each task only its own GPU: one rank per visible GPU still holds.
        device = pin_device(backend, 0)
    else:
        backend = resolve_backend(backend, place.local_world_size)
        device = pin_device(backend, place.local_rank)
    options = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method="env://", rank=place.rank, world_size=place.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s), **options)
    try:
        result = function(place.rank, place.world_size, *args)
        dist.barrier()  # nobody tears down its connections while a peer still talks to it
        return result
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.real.launch.torchrun", description=__doc__)
    parser.add_argument("target", help="package.module:function, e.g. course_lib.examples.ddp:main")
    parser.add_argument("args", nargs="*", help="extra arguments, passed to the function as strings")
    parser.add_argument("--backend", choices=BACKENDS, default=os.environ.get("COURSE_BACKEND", "auto"),
                        help="auto (default; COURSE_BACKEND overrides): nccl with one GPU per local rank")
    parser.add_argument("--timeout", type=float, default=600, help="collective timeout in seconds")
    options = parser.parse_args(argv)
    try:
        function = load_target(options.target)
        place = rank_environment()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        run_target(function, options.args, place, options.backend, options.timeout)
    except Exception:  # noqa: BLE001 - report which rank failed, then fail the job step
        print(f"[rank {place.rank}] failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return 1
    return 0


def _exit_now(code: int) -> None:
    """Leave without the interpreter's teardown, where gloo's background threads can abort the
    process ("terminate called without an active exception") after the work succeeded."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
