"""Which hidden test cells the isolated judge re-runs, and with what: (assignment, grade_id) -> check.

The authoritative score of a listed cell is the lower of the notebook's and the judge's. Each exercise's
hidden-check module (checks/chNN_<exercise>.py) exports its rows beside its points; this only collects
them. Every graded test cell in solutions/ must appear (autograde_tests/test_registry.py enforces it).
"""

from course_lib.grading.autograder.exercise_registry import ExerciseRegistry

EXERCISES = (
    "ch01_mlp",
    "ch02_ring",
    "ch02_prediction",
    "ch03_ddp",
    "ch04_stage_split",
    "ch05_pipeline",
    "ch05_zero_bubble",
    "ch06_tensor_parallel",
    "ch06_vocab_loss",
    "ch06_sequence_parallel",
    "ch07_zero",
    "ch07_optimizer",
    "ch07_fsdp",
    "ch08_mesh",
    "ch08_capstone",
    "ch09_checkpoint",
    "ch10_ring_attention",
    "ch10_ring_backward",
    "ch11_expert_parallel",
    "ch11_deepseek_moe",
)
CHECKS = ExerciseRegistry(EXERCISES)
