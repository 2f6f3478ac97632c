"""Chapter 09's checks, the scenarios: save and load on real ranks, saves killed half-way, runs preempted
and resumed. The visible checks run them with fixed cases; the instructor's hidden checks with drawn ones.

Each scenario returns a list of problems (empty: passed); the check that runs it turns them into one
failure message. The exercise's refusal goes with every student function handed in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from course_lib.grading.attempt.judge_runner import failures, values_as
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch09_checkpoint.judge import (
    exact_problems,
    resume_window_problems,
    run_failure,
    simulated_training,
    state_difference,
    training_problems,
)
from course_lib.grading.checks.ch09_checkpoint.ranks import (
    LoadOutcome,
    RoundTripOutcome,
    load_side,
    make_state,
    round_trip_side,
    save_versions_side,
    scratch_folder,
    train_side,
)
from course_lib.grading.checks.ch09_checkpoint.training_job import TrainingJob
from course_lib.real.cluster.preemption import PreemptedRun, Preemption, run_preempted

REFUSAL = Refusal(
    "your checkpointing", modules=("torch.distributed.checkpoint._experimental",),
    why="its Checkpointer writes each rank's file, waits for every rank at a barrier and commits: the "
        "protocol this exercise asks you to design (torch.save, torch.load and DCP's save and load are "
        "allowed)",
    allowed=("grading/checks/ch09_checkpoint/training_job.py", "real/cluster/preemption_rank.py"))


def students(**functions):
    """The student's functions by name, each under the exercise's refusal."""
    return [as_student_function(function, name, REFUSAL) for name, function in functions.items()]


def round_trip_problems(save, load, world_size: int, new_world_size: int, seed: int, timeout: float,
                        saves: int = 2) -> list:
    """``saves`` saves on ``world_size`` ranks, loaded there and on ``new_world_size`` ranks (rank r gets
    what rank r % world_size saved last); an empty folder loads as None."""
    save, load = students(save_checkpoint=save, load_checkpoint=load)
    times = "twice" if saves == 2 else f"{saves} times"
    with scratch_folder() as folder, scratch_folder() as empty:
        first = run_preempted(round_trip_side, world_size, save, load, folder, seed, empty, saves,
                              timeout=timeout)
        failure = run_failure(first, f"saving {times} then loading on {world_size} ranks (seed {seed})")
        if failure:
            return [failure]
        again = run_preempted(load_side, new_world_size, load, [folder], timeout=timeout)
    problems = []
    for rank, outcome in sorted(values_as(first, RoundTripOutcome).items()):
        if outcome.empty is not None:
            problems.append(f"rank {rank}: load_checkpoint of an empty folder returned "
                            f"{str(outcome.empty)[:60]}, expected None")
        difference = state_difference(make_state(seed, rank, saves), outcome.loaded)
        if difference:
            older = next((v for v in range(saves - 1, 0, -1)
                          if state_difference(make_state(seed, rank, v), outcome.loaded) is None), None)
            which = f" (it is save number {older} of {saves}: how are the versions ordered?)" if older else ""
            problems.append(f"rank {rank}, saving {times} and loading on the same {world_size} ranks "
                            f"(seed {seed}): the loaded state is not the last one this rank saved{which}: "
                            f"{difference}")
    failure = run_failure(again, f"loading on {new_world_size} ranks what {world_size} ranks saved "
                                 f"(seed {seed})")
    if failure:
        return problems + [failure]
    for rank, (loaded,) in sorted(values_as(again, LoadOutcome, per_case=True).items()):
        if loaded.raised:
            problems.append(f"rank {rank} of {new_world_size}, loading what {world_size} ranks saved (seed "
                            f"{seed}): load_checkpoint raised {loaded.raised}")
            continue
        difference = state_difference(make_state(seed, rank % world_size, saves), loaded.state)
        if difference:
            problems.append(f"rank {rank} of {new_world_size}, loading what {world_size} ranks saved (seed "
                            f"{seed}): expected the state rank {rank % world_size} saved: {difference}")
    return problems


@dataclass(frozen=True)
class SaveProfile:
    """What an unpreempted run wrote: each rank's file-name changes after each step, and the largest file."""

    changes: dict[tuple[int, int], int]      # (rank, step) -> number of changes after that step
    largest_file: int
    last_open: dict[int, tuple[int, int]] = field(default_factory=dict)
    # step -> (rank, which of its changes after that step) of the last file opened for writing there

    def torn_last_open(self, step: int) -> Preemption | None:
        """A kill just after the save's last opening of a file for writing, before its first byte (a
        marker written in place is then left empty), or None when that save opens none."""
        if step not in self.last_open:
            return None
        rank, change = self.last_open[step]
        return Preemption("file_change", step, amount=change, rank=rank, torn=True)

    def change_counts(self, step: int) -> dict[int, int]:
        return {rank: n for (rank, at), n in self.changes.items() if at == step}


def save_profile(run: PreemptedRun, folder: str) -> SaveProfile:
    counts: dict[tuple[int, int], int] = {}
    last_open: dict[int, tuple[int, int]] = {}
    for change in run.changes:
        counts[(change.rank, change.step)] = counts.get((change.rank, change.step), 0) + 1
        if change.event == "open":
            last_open[change.step] = (change.rank, counts[(change.rank, change.step)])
    sizes = [os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(folder) for name in names]
    return SaveProfile(counts, max(sizes, default=0), last_open)


def _version_of(loaded: LoadOutcome, seed: int, rank: int):
    if loaded.raised:
        return "raised"
    loaded = loaded.state
    if loaded is None:
        return None
    for version in (1, 2):
        if state_difference(make_state(seed, rank, version), loaded) is None:
            return version
    return "torn"


def _judge_killed_save(plan: Preemption, versions: list, errors: list, seed: int) -> str | None:
    """After a save killed as ``plan``: every rank loads the same complete version (or None for a first
    save), never a mix, never the loss of the version that was complete before."""
    where = f"(seed {seed}) the {'first' if plan.step == 0 else 'second'} save killed: {plan.how()}"
    allowed = (None, 1) if plan.step == 0 else (1, 2)
    if "raised" in versions:
        rank = versions.index("raised")
        return (f"{where}; then load_checkpoint raised on rank {rank}: it read what the killed save had "
                f"half-written ({errors[rank]})")
    if "torn" in versions:
        rank = versions.index("torn")
        return f"{where}; then load_checkpoint gave rank {rank} a state neither the old one nor the new"
    if len(set(versions)) > 1:
        return (f"{where}; then load_checkpoint gave the ranks versions {versions}: a checkpoint must be "
                "complete on every rank before any rank can load it")
    if versions[0] not in allowed:
        return (f"{where}; then load_checkpoint returned None although version 1 was complete before the "
                "killed save: the previous checkpoint was lost")
    return None


def atomic_problems(save, load, world_size: int, seed: int, choose: Callable[[SaveProfile], list],
                    timeout: float) -> list:
    """Saves killed half-way (``choose`` picks the kills from an unkilled run's profile), then loaded."""
    save, load = students(save_checkpoint=save, load_checkpoint=load)
    with scratch_folder() as folder:
        reference = run_preempted(save_versions_side, world_size, save, folder, seed, 2, folder=folder,
                                  timeout=timeout)
        failure = run_failure(reference, f"saving twice on {world_size} ranks (seed {seed})")
        if failure:
            return [failure]
        plans = choose(save_profile(reference, folder))
    folders, struck = [], []
    with ExitStack() as stack:
        for plan in plans:
            folder = os.path.join(stack.enter_context(scratch_folder()), "checkpoints")   # made by the save
            killed = run_preempted(save_versions_side, world_size, save, folder, seed, 2, preemption=plan,
                                   folder=folder, timeout=timeout)
            if failures([killed]):
                return [run_failure(killed, f"saving on {world_size} ranks (seed {seed})")]
            if killed.struck:
                folders.append(folder)
            struck.append(killed.struck)
        loads = run_preempted(load_side, world_size, load, folders, timeout=timeout)
    failure = run_failure(loads, f"loading after a killed save on {world_size} ranks (seed {seed})")
    if failure:
        return [failure]
    judged = [plan for plan, hit in zip(plans, struck, strict=True) if hit]
    if not judged:
        return [f"(seed {seed}) none of the planned kills struck: does save_checkpoint write its files "
                "under path?"]
    problems = []
    records = values_as(loads, LoadOutcome, per_case=True)
    for index, plan in enumerate(judged):
        loaded = [records[rank][index] for rank in range(world_size)]
        versions = [_version_of(entry, seed, rank) for rank, entry in enumerate(loaded)]
        errors = [entry.raised for entry in loaded]
        problems += [p for p in [_judge_killed_save(plan, versions, errors, seed)] if p]
    return problems


def resume_window(plan: Preemption, save_every: int) -> tuple[int, int]:
    """The steps a resumed run may start at: right after the newest checkpoint complete at the kill."""
    if plan.kind == "sigkill":
        return (plan.step // save_every) * save_every + 1, plan.step + 1
    if plan.kind == "sigterm":
        return plan.step + 1, plan.step + 2
    return plan.step - save_every + 1, plan.step + 1


def resume_problems(train, settings: dict, world_size: int, new_world_size: int,
                    choose: Callable[[SaveProfile | None], list], exact: bool, timeout: float) -> list:
    """Run train(job) killed as ``choose`` plans, resume it on ``new_world_size`` ranks, compare."""
    (student,) = students(train=train)
    losses, weights = simulated_training(TrainingJob("-", **settings), world_size)
    steps = range(1, settings.get("total_steps", TrainingJob.total_steps) + 1)
    reference, profile = None, None
    if exact:
        with scratch_folder() as folder:
            job = TrainingJob(folder, **settings)
            reference = run_preempted(train_side, world_size, student, job, folder=folder, timeout=timeout)
            what = f"train(job) on {world_size} ranks, never interrupted (seed {job.seed})"
            problems = [run_failure(reference, what)] if run_failure(reference, what) else \
                training_problems(reference, job, steps, losses, weights, what)
            if problems:
                return problems
            profile = save_profile(reference, folder)
    problems = []
    for plan in choose(profile):
        with scratch_folder() as folder:
            job = TrainingJob(folder, **settings)
            problems += _preempted_and_resumed(student, job, plan, world_size, new_world_size, reference,
                                               (steps, losses, weights), timeout)
    return problems


def _preempted_and_resumed(student, job, plan, world_size, new_world_size, reference, plain, timeout) -> list:
    what = f"(seed {job.seed}, save_every={job.save_every}) {plan.describe()}, on {world_size} ranks"
    killed = run_preempted(train_side, world_size, student, job, preemption=plan, folder=job.checkpoint_dir,
                           timeout=timeout)
    if failures([killed]):
        return [run_failure(killed, f"{what}: the run failed before the preemption")]
    if not killed.struck:
        return [f"{what}: the run ended before the planned preemption struck (does train report each step "
                "with job.report, and save every save_every steps under job.checkpoint_dir?)"]
    if plan.kind == "sigterm" and not killed.all_returned:
        ended = "; ".join(f"rank {r}: {o}" for r, o in sorted(killed.outcomes.items()) if o != "returned")
        return [f"{what}: after SIGTERM every rank must save and return from train(job) within "
                f"job.grace_s = {job.grace_s:g} s; {ended}"]
    on = f"{what}, resumed on {new_world_size} ranks"
    resumed = run_preempted(train_side, new_world_size, student, job, folder=job.checkpoint_dir,
                            timeout=timeout)
    failure = run_failure(resumed, on)
    if failure:
        return [failure]
    lowest, highest = resume_window(plan, job.save_every)
    problems = resume_window_problems(resumed, lowest, highest, plan, on)
    if problems:
        return problems
    if reference is not None:
        return exact_problems(resumed, reference, on)
    steps, losses, weights = plain
    first = resumed.steps.get(0, [(steps[-1] + 1, "")])[0][0]
    return training_problems(resumed, job, range(first, steps[-1] + 1), losses, weights, on)
