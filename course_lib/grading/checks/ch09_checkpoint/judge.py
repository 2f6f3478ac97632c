"""Chapter 09's checks, judging side: what a run should have given, and how a difference is worded.

``simulated_training`` plays the plain data-parallel loop (every rank's batch, dropout and gradient) in
this one process, for the checks to compare a student's run with; ``state_difference`` finds where two
saved states differ; ``run_failure`` words a run that did not complete; ``resumed_problems`` judges a run
that was preempted and resumed against one that was not.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data.distributed import DistributedSampler

from course_lib.grading.attempt.judge_runner import failures
from course_lib.grading.attempt.rank_attempt import student_frames
from course_lib.real.cluster.preemption import PreemptedRun, Preemption

LOSS_TOLERANCE = dict(rtol=1e-4, atol=1e-6)


def simulated_training(job, world_size: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The mean loss over ranks at each step, and the final weights, of the plain loop on world_size ranks."""
    model, per_rank = job.build_model(), job.global_batch // world_size
    optimizer = job.build_optimizer(model.parameters())
    losses = []
    with torch.random.fork_rng(devices=[]):
        states = []
        for rank in range(world_size):
            torch.manual_seed(job.rank_seed(rank))
            states.append(torch.get_rng_state())
        for step in range(job.total_steps):
            epoch, position = divmod(step, job.steps_per_epoch)
            optimizer.zero_grad()
            total = 0.0
            for rank in range(world_size):
                sampler = DistributedSampler(job.dataset, world_size, rank, shuffle=True, seed=job.seed,
                                             drop_last=True)
                sampler.set_epoch(epoch)
                rows = list(sampler)[position * per_rank:(position + 1) * per_rank]
                torch.set_rng_state(states[rank])
                loss = job.loss(model, *job.dataset[rows])
                states[rank] = torch.get_rng_state()
                (loss / world_size).backward()
                total += loss.item()
            optimizer.step()
            losses.append(total / world_size)
    return losses, {name: value.detach().clone() for name, value in model.state_dict().items()}


def _where(path: str) -> str:
    return path or "the whole state"


def state_difference(expected, got, path: str = "") -> str | None:
    """Where ``got`` first differs from ``expected`` (exactly: types, keys, dtypes, values), or None."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{_where(path)}: expected a tensor, got {type(got).__name__}"
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return (f"{_where(path)}: expected {expected.dtype} of shape {tuple(expected.shape)}, got "
                    f"{got.dtype} of shape {tuple(got.shape)}")
        return None if torch.equal(got, expected) else f"{_where(path)}: the values differ"
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{_where(path)}: expected a dict, got {type(got).__name__}"
        if set(got) != set(expected):
            return (f"{_where(path)}: expected the keys {sorted(expected, key=str)}, got "
                    f"{sorted(got, key=str)}")
        found = (state_difference(expected[key], got[key], f"{path}[{key!r}]") for key in expected)
        return next((d for d in found if d), None)
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return f"{_where(path)}: expected a list of {len(expected)}, got {str(got)[:60]}"
        pairs = enumerate(zip(expected, got, strict=True))
        found = (state_difference(e, g, f"{path}[{i}]") for i, (e, g) in pairs)
        return next((d for d in found if d), None)
    if type(got) is not type(expected) or got != expected:
        return f"{_where(path)}: expected {expected!r}, got {str(got)[:60]}"
    return None


def run_failure(run: PreemptedRun, what: str) -> str | None:
    """Why ``run`` did not complete as a run that nobody preempted should, with the first traceback."""
    reasons = failures([run])   # a failure other than the preemption: a rank raised first, a hang
    if not reasons and run.all_returned:
        bad = {rank: value for rank, value in run.values.items() if isinstance(value, str)}
        return f"{what}: {next(iter(bad.values()))}" if bad else None
    ended = (f"rank {rank}: {outcome}" for rank, outcome in sorted(run.outcomes.items())
             if outcome != "returned")
    lead = reasons[0] if reasons else "; ".join(ended)
    if "NotImplementedError" in lead:
        return f"{what}: not written yet (it raises NotImplementedError)"
    trace = next(iter(run.tracebacks.items()), None)
    frames = f"\n--- rank {trace[0]} ---\n{student_frames(trace[1])}" if trace else ""
    return f"{what}: {lead}{frames}"


def losses_of(run: PreemptedRun, rank: int) -> dict[int, str]:
    """step -> the loss text a rank reported (the last report of each step)."""
    return dict(run.steps.get(rank, []))


def _mean_losses(run: PreemptedRun) -> dict[int, float]:
    reported = [losses_of(run, rank) for rank in range(run.world_size)]
    steps = set.intersection(*(set(r) for r in reported)) if reported else set()
    means = {}
    for step in steps:
        try:
            means[step] = sum(float.fromhex(r[step]) for r in reported) / run.world_size
        except ValueError:
            means[step] = math.nan
    return means


def training_problems(run: PreemptedRun, job, steps: range, losses: list[float], weights: dict,
                      what: str) -> list[str]:
    """Reported steps exactly ``steps`` on every rank, losses and final weights close to the plain loop's."""
    problems = []
    for rank in range(run.world_size):
        got = [step for step, _ in run.steps.get(rank, [])]
        if got != list(steps):
            return [f"{what}: rank {rank} reported the steps {got[:14]}, expected {list(steps)[:14]} "
                    "(job.report(step, loss) after each step, on every rank, steps counted from 1)"]
    for step, mean in sorted(_mean_losses(run).items()):
        if not math.isclose(mean, losses[step - 1], rel_tol=LOSS_TOLERANCE["rtol"], abs_tol=1e-6):
            problems.append(f"{what}: the loss of step {step} (mean over ranks) is {mean:.6f}; the plain "
                            f"loop's is {losses[step - 1]:.6f}")
            break
    final = run.values.get(0)
    if isinstance(final, dict) and set(final) == set(weights):
        far = [name for name in weights if not torch.allclose(final[name], weights[name], **LOSS_TOLERANCE)]
        if far:
            problems.append(f"{what}: the final weights differ from the plain loop's ({', '.join(far)})")
    elif final is not None:
        problems.append(f"{what}: train(job) returned a model with the weights {sorted(final)[:6]}, "
                        f"expected {sorted(weights)}")
    return problems


def first_resumed_step(run: PreemptedRun) -> int | None:
    steps = run.steps.get(0, [])
    return steps[0][0] if steps else None


def exact_problems(run: PreemptedRun, reference: PreemptedRun, what: str) -> list[str]:
    """Every loss the resumed run reported, and its final weights, bit for bit the uninterrupted run's."""
    for rank in range(run.world_size):
        expected = losses_of(reference, rank)
        for step, text in run.steps.get(rank, []):
            if expected.get(step) != text:
                return [f"{what}: rank {rank}'s loss at step {step} is {_number(text)}, the uninterrupted "
                        f"run's was {_number(expected.get(step))}: the resumed run does not continue "
                        "exactly where the killed one stood (does the checkpoint hold everything the next "
                        "step depends on?)"]
    final, wanted = run.values.get(0), reference.values.get(0)
    if isinstance(final, dict) and isinstance(wanted, dict):
        differ = [name for name in wanted if name not in final or not torch.equal(final[name], wanted[name])]
        if differ:
            return [f"{what}: the final weights differ from the uninterrupted run's ({', '.join(differ)})"]
    return []


def _number(text) -> str:
    try:
        return f"{float.fromhex(text):.8f}"
    except (TypeError, ValueError):
        return str(text)


def resume_window_problems(run: PreemptedRun, lowest: int, highest: int, plan: Preemption, what: str) -> list:
    """The resumed run must start right after the newest checkpoint that was complete at the kill."""
    first = first_resumed_step(run)
    if first is None or lowest <= first <= highest:
        return []
    if first < lowest:
        lost = "from scratch: no checkpoint was found" if first == 1 else f"again at step {first}"
        return [f"{what}: the resumed run started {lost}, but the checkpoint of step {lowest - 1} was "
                f"complete before the kill ({plan.describe()}): that work was lost"]
    return [f"{what}: the resumed run started at step {first}, but the killed run had only completed "
            f"step {highest - 1} ({plan.describe()})"]
