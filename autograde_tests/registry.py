"""Which hidden test cells the isolated judge re-runs, and with what: (assignment, grade_id) -> check.

The authoritative score of a listed cell is the lower of the notebook's and the judge's. Every graded
test cell in solutions/ must appear here (autograde_tests/test_registry.py enforces it).
"""

from course_lib.grading.judge import IsolatedCheck

CH01 = "autograde_tests.checks.ch01_mlp:"
CH02 = "autograde_tests.checks.ch02_ring:"
CH03 = "autograde_tests.checks.ch03_ddp:"

CHECKS = {
    ("01_mlp_by_hand", "test_manual_backward_course"): IsolatedCheck(
        CH01 + "check_manual_backward_hidden_seeds", ("manual_backward",)),
    ("01_mlp_by_hand", "test_manual_backward_shapes"): IsolatedCheck(
        CH01 + "check_manual_backward_hidden_shapes", ("manual_backward",)),
    ("01_mlp_by_hand", "test_manual_backward_batch_of_one"): IsolatedCheck(
        CH01 + "check_manual_backward_hidden_batch_of_one", ("manual_backward",)),
    ("02_collectives", "test_ring_reduce_scatter"): IsolatedCheck(
        CH02 + "check_ring_reduce_scatter_hidden", ("ring_reduce_scatter",)),
    ("02_collectives", "test_ring_all_gather"): IsolatedCheck(
        CH02 + "check_ring_all_gather_hidden", ("ring_all_gather",)),
    ("02_collectives", "test_ring_all_reduce_values"): IsolatedCheck(
        CH02 + "check_ring_all_reduce_hidden", ("ring_all_reduce",)),
    ("02_collectives", "test_ring_all_reduce_traffic"): IsolatedCheck(
        CH02 + "check_ring_all_reduce_traffic_hidden", ("ring_all_reduce",)),
    ("02_collectives", "test_ring_all_reduce_no_collectives"): IsolatedCheck(
        CH02 + "check_ring_all_reduce_no_collectives_hidden", ("ring_all_reduce",)),
    ("02_collectives", "test_ring_all_reduce_no_deadlock"): IsolatedCheck(
        CH02 + "check_ring_all_reduce_no_deadlock_hidden", ("ring_all_reduce",)),
    ("03_data_parallel", "test_ddp_broadcast"): IsolatedCheck(CH03 + "check_ddp_broadcast_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_gradients"): IsolatedCheck(CH03 + "check_ddp_gradients_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_frozen_and_tied"): IsolatedCheck(
        CH03 + "check_ddp_frozen_and_tied_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_unused_parameters"): IsolatedCheck(
        CH03 + "check_ddp_unused_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_overlap"): IsolatedCheck(CH03 + "check_ddp_overlap_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_one_rank"): IsolatedCheck(CH03 + "check_ddp_one_rank_hidden", ("DDP",)),
}
