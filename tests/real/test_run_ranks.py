"""run_ranks on real forked processes: results, output, failures, hangs, interrupts, leftovers."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from course_lib.real import RankFailure, RanksHungError, run_ranks


def child_pids() -> set[int]:
    """Live (non-zombie) processes whose parent is this test process."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(entry))
    return found


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(autouse=True)
def no_leftover_children():
    before = child_pids()
    yield
    assert child_pids() - before == set(), "run_ranks left processes behind"


def sum_of_ranks(rank, world_size, offset):
    tensor = torch.tensor([float(rank + offset)])
    dist.all_reduce(tensor)
    return rank, world_size, tensor.item()


def test_results_come_back_in_rank_order_with_the_group_initialised():
    results = run_ranks(sum_of_ranks, 3, 10)
    assert results == [(rank, 3, 33.0) for rank in range(3)]


def test_each_rank_output_is_prefixed_with_its_rank(capsys):
    def talk(rank, world_size):
        print(f"hello from {rank}")
        print("no newline at the end", end="")

    run_ranks(talk, 2)
    out = capsys.readouterr().out.splitlines()
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out
    assert out.count("[rank 1] no newline at the end") == 1


def test_a_failing_rank_is_reraised_with_its_traceback_and_the_others_stopped():
    def fail_on_two(rank, world_size):
        if rank == 2:
            raise ValueError("rank two is broken")
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(RankFailure) as caught:
        run_ranks(fail_on_two, 4, timeout=60)
    assert time.monotonic() - started < 10
    assert caught.value.rank == 2
    assert "ValueError: rank two is broken" in str(caught.value)
    assert "fail_on_two" in caught.value.remote_traceback
    assert "_child.py" not in caught.value.remote_traceback


@pytest.mark.parametrize("how", ["exit", "signal"])
def test_a_rank_that_dies_without_raising_is_reported(how):
    def die(rank, world_size):
        if rank == 1:
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)

    with pytest.raises(RankFailure, match="rank 1 failed") as caught:
        run_ranks(die, 2, timeout=60)
    assert ("code 3" if how == "exit" else "SIGKILL") in str(caught.value)


def test_a_ring_of_blocking_sends_is_reported_as_a_hang_with_each_blocked_line():
    def ring(rank, world_size):
        payload = torch.zeros(1 << 20)
        dist.send(payload, (rank + 1) % world_size)  # every rank sends first: deadlock
        dist.recv(payload, (rank - 1) % world_size)

    started = time.monotonic()
    with pytest.raises(RanksHungError) as caught:
        run_ranks(ring, 3, timeout=1.5)
    assert time.monotonic() - started < 1.5 + 5
    assert isinstance(caught.value, TimeoutError)
    assert sorted(caught.value.blocked_at) == [0, 1, 2]
    for where in caught.value.blocked_at.values():
        assert "in ring()" in where and "dist.send(payload" in where
    assert "isend" in str(caught.value)  # the hint


def test_a_hang_names_only_the_ranks_still_running():
    def rank_zero_waits_forever(rank, world_size):
        if rank == 0:
            dist.recv(torch.zeros(1), 1)
        return rank

    with pytest.raises(RanksHungError) as caught:
        run_ranks(rank_zero_waits_forever, 2, timeout=1.5)
    assert list(caught.value.blocked_at) == [0] and caught.value.finished == (1,)


def test_grandchildren_are_killed_too():
    def start_sleeper(rank, world_size):
        return subprocess.Popen(["sleep", "60"]).pid

    pids = run_ranks(start_sleeper, 2)
    time.sleep(0.1)
    assert not any(pid_alive(pid) for pid in pids)


def test_keyboard_interrupt_in_the_caller_stops_every_rank():
    def sleep_long(rank, world_size):
        time.sleep(60)

    # Python's own Ctrl-C handler, also where the suite was started with SIGINT ignored (a background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_ranks(sleep_long, 2, timeout=30)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 5


def test_two_concurrent_calls_do_not_collide():
    outcomes = {}

    def call(name, offset):
        outcomes[name] = run_ranks(sum_of_ranks, 2, offset)

    threads = [threading.Thread(target=call, args=(name, offset)) for name, offset in (("a", 0), ("b", 100))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes == {"a": [(0, 2, 1.0), (1, 2, 1.0)], "b": [(0, 2, 201.0), (1, 2, 201.0)]}


def test_an_unpicklable_result_is_a_clear_failure():
    with pytest.raises(RankFailure, match="could not be sent back"):
        run_ranks(lambda rank, world_size: threading.Lock(), 2)


def test_a_result_this_process_cannot_unpickle_is_a_clear_failure():
    def ghost(rank, world_size):
        import types

        module = sys.modules["ghost_module"] = types.ModuleType("ghost_module")
        exec("class Ghost:\n    pass", module.__dict__)
        return module.Ghost()

    with pytest.raises(RankFailure, match="could not be read here"):
        run_ranks(ghost, 1)


class _RunsCodeWhenUnpickled:
    def __reduce__(self):
        return (os.environ.__setitem__, ("COURSE_TEST_PWNED", "1"))


def test_plain_results_come_back_and_a_crafted_pickle_runs_nothing_here():
    def plain(rank, world_size):
        return {"rank": rank, "values": [1.5, None, "x", (2, 3)], "tensor": torch.arange(3)[::2]}

    [first, second] = run_ranks(plain, 2, plain_results=True)
    assert second["rank"] == 1 and first["values"] == [1.5, None, "x", (2, 3)]
    assert first["tensor"].tolist() == [0, 2]
    os.environ.pop("COURSE_TEST_PWNED", None)

    def crafted(rank, world_size):
        import course_lib.real.launch._child as child

        child.plain_encode = pickle.dumps  # a rank running hostile code controls what it sends
        return _RunsCodeWhenUnpickled()

    with pytest.raises(RankFailure, match="could not be read here"):
        run_ranks(crafted, 1, plain_results=True)
    assert "COURSE_TEST_PWNED" not in os.environ


def test_tensors_and_large_results_come_back():
    results = run_ranks(lambda rank, world_size: torch.full((1 << 20,), float(rank)), 2)
    assert [float(result.mean()) for result in results] == [0.0, 1.0]


@pytest.mark.parametrize("bad, message", [
    ({"fn": 3}, "run_ranks needs a function"),
    ({"world_size": 0}, "world_size must be a positive int"),
    ({"timeout": -1}, "timeout must be a positive"),
    ({"backend": "mpi"}, "backend must be one of"),
])
def test_bad_arguments_are_refused_with_a_clear_message(bad, message):
    arguments = {"fn": sum_of_ranks, "world_size": 2, "timeout": 5, "backend": "gloo"} | bad
    fn, world_size = arguments.pop("fn"), arguments.pop("world_size")
    with pytest.raises((TypeError, ValueError), match=message):
        run_ranks(fn, world_size, 0, **arguments)


def test_nccl_without_enough_gpus_says_what_to_do():
    if torch.cuda.is_available() and torch.cuda.device_count() >= 64:
        pytest.skip("this machine has 64 GPUs")
    with pytest.raises(RuntimeError, match="one GPU per rank"):
        run_ranks(sum_of_ranks, 64, 0, backend="nccl")


def test_auto_backend_falls_back_to_gloo_without_gpus():
    if torch.cuda.is_available():
        pytest.skip("GPUs present: auto picks nccl here")
    assert run_ranks(lambda rank, world_size: dist.get_backend(), 2, backend="auto") == ["gloo", "gloo"]


def test_a_group_already_initialised_in_the_caller_is_refused():
    def nested(rank, world_size):
        return run_ranks(sum_of_ranks, 2, 0)

    with pytest.raises(RankFailure, match="already initialised in this process"):
        run_ranks(nested, 1)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_nccl_pins_one_gpu_per_rank_and_results_come_back_on_the_cpu():
    def on_gpu(rank, world_size):
        tensor = torch.ones(4, device="cuda") * (rank + 1)
        dist.all_reduce(tensor)
        return torch.cuda.current_device(), tensor

    results = run_ranks(on_gpu, 2, backend="nccl")
    assert [device for device, _ in results] == [0, 1]
    assert all(tensor.device.type == "cpu" and tensor.tolist() == [3.0] * 4 for _, tensor in results)
    assert not torch.cuda.is_initialized()


@pytest.mark.slow
def test_two_processes_calling_run_ranks_at_once_do_not_collide():
    script = ("import torch, torch.distributed as dist\n"
              "from course_lib.real import run_ranks\n"
              "def total(rank, world_size):\n"
              "    t = torch.ones(1); dist.all_reduce(t); return t.item()\n"
              "for _ in range(5):\n"
              "    assert run_ranks(total, 4) == [4.0] * 4\n"
              "print('ok')\n")
    environment = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    callers = [subprocess.Popen([sys.executable, "-c", script], env=environment, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for caller in callers:
        out, err = caller.communicate(timeout=120)
        assert caller.returncode == 0 and out.strip() == "ok", err[-2000:]
