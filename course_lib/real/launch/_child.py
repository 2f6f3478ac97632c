"""What one forked rank does: wire its output to the parent, join the process group, run fn, report.

Runs only in a child made by ``run_ranks``; it never returns (it ends with ``os._exit``) so nothing the
parent set up (atexit hooks, Jupyter's threads, pytest's capture) runs twice.
"""

from __future__ import annotations

import ctypes
import datetime
import faulthandler
import io
import os
import pickle
import signal
import sys
import traceback
from dataclasses import dataclass

from ..plumbing.plain import encode as plain_encode
from ..plumbing.processes import mark_forked_child
from .rank_outcome import RankRaised, RankReturned, to_wire


@dataclass
class RankPipes:
    """The five pipes between the parent and one rank: (read end, write end) each."""

    out: tuple[int, int]
    err: tuple[int, int]
    result: tuple[int, int]
    stack: tuple[int, int]
    control: tuple[int, int]

    @classmethod
    def create(cls) -> RankPipes:
        return cls(os.pipe(), os.pipe(), os.pipe(), os.pipe(), os.pipe())

    def child_ends(self) -> tuple[int, ...]:
        return self.out[1], self.err[1], self.result[1], self.stack[1], self.control[0]

    def parent_ends(self) -> tuple[int, ...]:
        return self.out[0], self.err[0], self.result[0], self.stack[0], self.control[1]


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank if the notebook kernel dies, so no rank outlives it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _text_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _CpuPickler(pickle.Pickler):
    """Pickles GPU tensors as CPU copies: unpickling a CUDA tensor would initialise CUDA in the
    notebook's kernel, after which forked ranks can no longer use the GPU."""

    def reducer_override(self, obj):
        import torch

        if isinstance(obj, torch.Tensor) and obj.is_cuda:
            return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _dumps(payload) -> bytes:
    buffer = io.BytesIO()
    _CpuPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(payload)
    return buffer.getvalue()


def _report(fd: int, outcome: RankReturned | RankRaised, plain: bool) -> None:
    encode = plain_encode if plain else _dumps
    try:
        data = encode(to_wire(outcome))
    except Exception as error:  # noqa: BLE001 - any pickling failure must reach the notebook
        data = encode(to_wire(RankRaised(
            "PicklingError", f"the value returned by rank could not be sent back to the notebook: {error}",
            "return a plain value (numbers, lists, dicts, tensors) instead\n")))
    _write_all(fd, len(data).to_bytes(8, "little") + data)  # length first: EOF may never come (see runner)


def _user_traceback(error: BaseException):
    """The traceback without this bootstrap's own frames, so it starts at the student's function."""
    here = os.path.dirname(os.path.abspath(__file__))
    tb = error.__traceback__
    while tb is not None and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == here:
        tb = tb.tb_next
    return tb or error.__traceback__


def _join_group(rank: int, world_size: int, backend: str, port: int, listen_fd: int,
                timeout_s: float) -> None:
    import torch.distributed as dist

    from ..plumbing.backend import pin_device

    timeout = datetime.timedelta(seconds=timeout_s)
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", port, world_size, True, timeout, wait_for_workers=False,
                              master_listen_fd=listen_fd)
    else:
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout)
    device = pin_device(backend, rank)
    options = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout,
                            **options)


@dataclass(frozen=True)
class ChildJob:
    """Everything one forked rank needs: what to run, where to report, and how to join the group."""

    rank: int
    world_size: int
    fn: object
    args: tuple
    backend: str
    pipes: RankPipes
    all_fds: tuple[int, ...]  # every pipe end of the call: the rank closes the ones that are not its own
    listen_fd: int  # the store's listening socket, bound by the parent so its port cannot be taken
    port: int
    pgid: int  # 0: this rank starts the call's process group
    group_timeout_s: float
    plain_results: bool = False


def _wire_stdio(job: ChildJob) -> None:
    """Keep only this rank's pipe ends, and point stdin/stdout/stderr and stack dumps at them."""
    own = set(job.pipes.child_ends()) | {job.listen_fd}
    for fd in job.all_fds:
        if fd not in own:
            try:
                os.close(fd)
            except OSError:
                pass
    out_fd, err_fd, _, stack_fd, _ = job.pipes.child_ends()
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout, sys.stderr = _text_stream(1), _text_stream(2)
    sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
    faulthandler.register(signal.SIGUSR1, file=stack_fd, all_threads=True, chain=False)


def _run_fn(job: ChildJob) -> RankReturned | RankRaised:
    try:
        if job.rank != 0:
            os.close(job.listen_fd)
        _join_group(job.rank, job.world_size, job.backend, job.port, job.listen_fd, job.group_timeout_s)
        return RankReturned(job.fn(job.rank, job.world_size, *job.args))
    except BaseException as error:  # noqa: BLE001 - the parent decides what to do with it
        text = "".join(traceback.format_exception(type(error), error, _user_traceback(error)))
        try:
            exception_bytes = pickle.dumps(error)
        except Exception:  # noqa: BLE001
            exception_bytes = None
        return RankRaised(type(error).__name__, str(error), text, exception_bytes)


def run_child(job: ChildJob) -> None:
    """The body of rank ``job.rank``; ends the process with ``os._exit``."""
    exit_code = 1
    try:
        mark_forked_child()
        try:
            os.setpgid(0, job.pgid)
        except OSError:
            pass
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the notebook's interrupt is the parent's to handle
        _wire_stdio(job)
        rank, world_size = str(job.rank), str(job.world_size)
        os.environ.update(RANK=rank, WORLD_SIZE=world_size, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=world_size,
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job.port))
        import torch

        # One intra-op thread per rank: N ranks share this machine's few cores, and OpenMP's thread
        # pool inherited through fork is not safe to reuse (PyTorch's DataLoader workers do the same).
        torch.set_num_threads(1)
        outcome = _run_fn(job)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _, _, result_fd, _, control_fd = job.pipes.child_ends()
        _report(result_fd, outcome, job.plain_results)
        os.close(result_fd)
        os.read(control_fd, 1)  # wait for the parent's word (or its death) before leaving
        exit_code = 1 if outcome.failed else 0
    except BaseException:  # noqa: BLE001 - never let a child fall back into the parent's code
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(exit_code)
