"""Which hidden test cells the isolated judge re-runs, and with what: (assignment, grade_id) -> check.

The authoritative score of a listed cell is the lower of the notebook's and the judge's. Every graded
test cell in solutions/ must appear here (autograde_tests/test_registry.py enforces it).
"""

from course_lib.grading.judge import IsolatedCheck

CH01 = "autograde_tests.checks.ch01_mlp:"
CH02 = "autograde_tests.checks.ch02_ring:"
CH07 = "autograde_tests.checks.ch07_zero:"
CH07_OPTIMIZER = "autograde_tests.checks.ch07_optimizer:"
CH07_FSDP = "autograde_tests.checks.ch07_fsdp:"

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
    ("07_zero_fsdp", "test_shard_parameters"): IsolatedCheck(
        CH07 + "check_shard_parameters_hidden", ("shard_parameters",)),
    ("07_zero_fsdp", "test_gather_parameters"): IsolatedCheck(
        CH07 + "check_gather_parameters_hidden", ("gather_parameters",)),
    ("07_zero_fsdp", "test_reduce_scatter_gradients"): IsolatedCheck(
        CH07 + "check_reduce_scatter_gradients_hidden", ("reduce_scatter_gradients",)),
    ("07_zero_fsdp", "test_sharded_optimizer_values"): IsolatedCheck(
        CH07_OPTIMIZER + "check_sharded_optimizer_values_hidden", ("ShardedOptimizer",)),
    ("07_zero_fsdp", "test_sharded_optimizer_memory"): IsolatedCheck(
        CH07_OPTIMIZER + "check_sharded_optimizer_memory_hidden", ("ShardedOptimizer",)),
    ("07_zero_fsdp", "test_sharded_optimizer_api"): IsolatedCheck(
        CH07_OPTIMIZER + "check_sharded_optimizer_api_hidden", ("ShardedOptimizer",)),
    ("07_zero_fsdp", "test_fsdp_values"): IsolatedCheck(CH07_FSDP + "check_fsdp_values_hidden", ("FSDP",)),
    ("07_zero_fsdp", "test_fsdp_memory"): IsolatedCheck(CH07_FSDP + "check_fsdp_memory_hidden", ("FSDP",)),
    ("07_zero_fsdp", "test_fsdp_traffic"): IsolatedCheck(CH07_FSDP + "check_fsdp_traffic_hidden", ("FSDP",)),
    ("07_zero_fsdp", "test_fsdp_mixed_precision"): IsolatedCheck(
        CH07_FSDP + "check_fsdp_mixed_precision_hidden", ("FSDP",)),
}
