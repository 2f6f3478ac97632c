"""Which hidden test cells the isolated judge re-runs, and with what: (assignment, grade_id) -> check.

The authoritative score of a listed cell is the lower of the notebook's and the judge's. Every graded
test cell in solutions/ must appear here (autograde_tests/test_registry.py enforces it).
"""

from course_lib.grading.judge import IsolatedCheck

CH01 = "autograde_tests.checks.ch01_mlp:"
CH02 = "autograde_tests.checks.ch02_ring:"
CH02_PREDICT = "autograde_tests.checks.ch02_predict:"

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
    ("02_collectives", "test_predict_gloo_all_reduce"): IsolatedCheck(
        CH02_PREDICT + "check_predict_hidden", ("predict_gloo_all_reduce",)),
    ("02_collectives", "test_predict_gloo_own_formula"): IsolatedCheck(
        CH02_PREDICT + "check_predict_own_formula", ("predict_gloo_all_reduce",)),
}
