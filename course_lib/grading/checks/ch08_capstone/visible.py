"""Checks of chapter 08's capstone: the groups each piece gets, a tensor-parallel stage, a training step.

References are torch's own: the groups are those of torch's DeviceMesh on real ranks (ch08_mesh's
torch_reference; nothing here lays out a mesh), the stage is compared with the unsharded blocks, and the
loss with plain single-process training. The pieces a check hands the student's code are PyTorch's
stand-ins behind course_lib.capstone's Pieces (never an answer of chapters 03-06): the exercise's Refusal
allows those files and refuses the rest of course_lib.
"""

from __future__ import annotations

from course_lib.capstone.run import MESH_NAMES, MESH_SHAPE, run_capstone, single_process_losses
from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch08_capstone.judge import stage_problems
from course_lib.grading.checks.ch08_capstone.ranks import StageOutcome, stage_side
from course_lib.grading.checks.ch08_mesh.visible import judge_calls, student_answers, torch_reference

# The capstone hands the answer its groups (capstone/groups.py), its pieces (capstone/run.py, played by
# the student's own chapter 03/05/06 answers or PyTorch's stand-ins) and the tied weight's stage and recording
# all-reduce (capstone/tied.py): those it may run; nothing else.
REFUSAL = Refusal("your capstone", allowed=("capstone/groups.py", "capstone/run.py", "capstone/standins.py",
                                            "capstone/loader.py", "capstone/tied.py"),
                  why="the capstone composes your own pieces")

PIECE_OF_DIMENSION = {"tp": "tensor_parallel", "dp": "data_parallel", "pp": "pipeline"}
VISIBLE_MESHES = {8: [(MESH_SHAPE, MESH_NAMES), ((2, 2, 2), ("tp", "pp", "dp")),
                      ((1, 2, 4), ("pp", "dp", "tp"))]}
LOSS_TOLERANCE = 1e-5
RANK_TIMEOUT_S = 120


def check_capstone_groups(capstone_groups) -> None:
    """Every rank of every mesh: the tensor-, data- and pipeline-parallel groups torch's mesh gives it."""
    calls, expected = [], []
    for (shape, names, _), per_rank in torch_reference(VISIBLE_MESHES).items():
        for rank, answer in enumerate(per_rank):
            calls.append((rank, shape, names))
            expected.append({PIECE_OF_DIMENSION[n]: answer["groups"][n] for n in names})
    outcomes = student_answers({"capstone_groups": capstone_groups},
                               [("capstone_groups", args) for args in calls], "capstone_groups", REFUSAL)
    judge_calls("capstone_groups", calls, outcomes, expected,
                "capstone_groups gives a piece the wrong group (torch's DeviceMesh is the reference)")
    print(f"capstone_groups: right on {len(VISIBLE_MESHES[8])} meshes, every rank")


def check_build_stage(build_stage, layers: int = 2, seed: int = 0, tp: int = 2) -> None:
    """On ``tp`` ranks: the stage gives the unsharded blocks' output and input gradient, and every rank
    holds 1/tp of the blocks' matrix weights."""
    student = as_student_function(build_stage, "build_stage", refusal=REFUSAL)
    run = run_answer(stage_side, tp, student, layers, seed, record=StageOutcome,
                     text=FailureText("build_stage"), timeout=RANK_TIMEOUT_S, one_per_rank=True)
    fail_with(stage_problems(run, layers, tp), "build_stage")
    print(f"build_stage: {layers} blocks split over {tp} ranks, same output and gradients as unsharded, "
          f"1/{tp} of the weights per rank")


def check_capstone_loss(capstone_groups, build_stage, capstone_step, steps: int = 2, microbatches: int = 2,
                        seed: int = 0, mesh=(MESH_SHAPE, MESH_NAMES)) -> dict:
    """One rank per device of ``mesh`` (DP 2 x TP 2 x PP 2 by default) with PyTorch's stand-in pieces: the
    loss of single-process training. Each rank trains on the data of its replica in torch's own mesh."""
    students = [as_student_function(f, n, refusal=REFUSAL) for f, n in
                ((capstone_groups, "capstone_groups"), (build_stage, "build_stage"),
                 (capstone_step, "capstone_step"))]
    try:
        run = run_capstone({}, *students, steps=steps, microbatches=microbatches, seed=seed,
                           timeout=RANK_TIMEOUT_S, plain_results=True, mesh_shape=mesh[0], mesh_names=mesh[1])
    except Exception as error:   # noqa: BLE001 - a rank's failure, a hang, a wrong group: all the student's
        raise AssertionError(f"the capstone did not run on mesh {mesh}: {error}") from None
    expected = single_process_losses(steps, seed)
    problems = [f"step {i}: loss {got:.7f} on mesh {mesh}, {want:.7f} in one process"
                for i, (got, want) in enumerate(zip(run["losses"], expected, strict=True))
                if not abs(got - want) <= LOSS_TOLERANCE]
    fail_with(problems, f"the capstone's loss differs from single-process training (tolerance "
                        f"{LOSS_TOLERANCE}; is each piece on its own dimension's group?)")
    print(f"capstone: {steps} steps on mesh {mesh}, loss equal to one process within {LOSS_TOLERANCE}")
    return run
