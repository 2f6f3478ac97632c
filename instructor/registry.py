"""Which hidden test cells the isolated judge re-runs, and with what: (assignment, grade_id) -> check.

The authoritative score of a listed cell is the lower of the notebook's and the judge's. Every graded
test cell in solutions/ must appear here (autograde_tests/test_registry.py enforces it).
"""

from course_lib.grading.autograder.judge import IsolatedCheck

CH01 = "ch01_mlp:"
CH02 = "ch02_ring:"
CH05 = "ch05_pipeline:"
CH05_ZB = "ch05_zero_bubble:"
CH06 = "ch06_tensor_parallel:"
CH06_VOCAB = "ch06_vocab_loss:"
TP_PAIR = ("ColumnParallelLinear", "RowParallelLinear")
CH08 = "ch08_mesh:"
CH03 = "ch03_ddp:"
CH07 = "ch07_zero:"
CH07_OPTIMIZER = "ch07_optimizer:"
CH07_FSDP = "ch07_fsdp:"
CH02_PREDICT = "ch02_prediction:"
CH08_CAPSTONE = "ch08_capstone:"
CH09 = "ch09_checkpoint:"
CH09_STORAGE = ("save_checkpoint", "load_checkpoint")
CH11 = "ch11_expert_parallel:"
EP = ("expert_parallel_forward",)
CH10 = "ch10_ring_attention:"
CH04 = "ch04_stage_split:"
SPLIT = ("split_stages",)

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
    # chapter 04's rows are also its hidden checks' ROWS (instructor/checks/ch04_stage_split.py)
    ("04_model_parallel", "test_split_stages_balance"): IsolatedCheck(
        CH04 + "check_split_stages_balance_hidden", SPLIT),
    ("04_model_parallel", "test_split_stages_memory"): IsolatedCheck(
        CH04 + "check_split_stages_memory_hidden", SPLIT),
    ("04_model_parallel", "test_split_stages_fitting_step"): IsolatedCheck(
        CH04 + "check_split_stages_fitting_step_hidden", SPLIT),
    ("04_model_parallel", "test_split_stages_real_run"): IsolatedCheck(
        CH04 + "check_split_stages_real_run_hidden", SPLIT),
    ("05_pipeline_parallel", "test_one_f_one_b_dependencies"): IsolatedCheck(
        CH05 + "check_one_f_one_b_dependencies_hidden", ("one_f_one_b",)),
    ("05_pipeline_parallel", "test_one_f_one_b_memory"): IsolatedCheck(
        CH05 + "check_one_f_one_b_memory_hidden", ("one_f_one_b",)),
    ("05_pipeline_parallel", "test_one_f_one_b_makespan"): IsolatedCheck(
        CH05 + "check_one_f_one_b_makespan_hidden", ("one_f_one_b",)),
    ("05_pipeline_parallel", "test_zero_bubble_h1_dependencies"): IsolatedCheck(
        CH05_ZB + "check_zero_bubble_h1_dependencies_hidden", ("zero_bubble_h1",)),
    ("05_pipeline_parallel", "test_zero_bubble_h1_memory"): IsolatedCheck(
        CH05_ZB + "check_zero_bubble_h1_memory_hidden", ("zero_bubble_h1",)),
    ("05_pipeline_parallel", "test_zero_bubble_h1_makespan"): IsolatedCheck(
        CH05_ZB + "check_zero_bubble_h1_makespan_hidden", ("zero_bubble_h1",)),
    ("05_pipeline_parallel", "test_run_stage_gpipe"): IsolatedCheck(
        CH05 + "check_run_stage_gpipe_hidden", ("run_stage",)),
    ("05_pipeline_parallel", "test_run_stage_1f1b"): IsolatedCheck(
        CH05 + "check_run_stage_1f1b_hidden", ("run_stage",)),
    ("05_pipeline_parallel", "test_run_stage_traffic"): IsolatedCheck(
        CH05 + "check_run_stage_traffic_hidden", ("run_stage",)),
    ("05_pipeline_parallel", "test_run_stage_mismatch"): IsolatedCheck(
        CH05 + "check_run_stage_mismatch_hidden", ("run_stage",)),
    ("06_tensor_parallel", "test_shard_columns"): IsolatedCheck(
        CH06 + "check_shard_columns_hidden", ("shard_columns",)),
    ("06_tensor_parallel", "test_shard_rows"): IsolatedCheck(
        CH06 + "check_shard_rows_hidden", ("shard_rows",)),
    ("06_tensor_parallel", "test_column_parallel_linear"): IsolatedCheck(
        CH06 + "check_column_parallel_linear_hidden", ("ColumnParallelLinear",)),
    ("06_tensor_parallel", "test_row_parallel_linear"): IsolatedCheck(
        CH06 + "check_row_parallel_linear_hidden", ("RowParallelLinear",)),
    ("06_tensor_parallel", "test_tensor_parallel_mlp"): IsolatedCheck(
        CH06 + "check_tensor_parallel_mlp_hidden", TP_PAIR),
    ("06_tensor_parallel", "test_tensor_parallel_mlp_traffic"): IsolatedCheck(
        CH06 + "check_tensor_parallel_mlp_traffic_hidden", TP_PAIR),
    ("06_tensor_parallel", "test_tensor_parallel_block"): IsolatedCheck(
        CH06 + "check_tensor_parallel_block_hidden", TP_PAIR),
    ("06_tensor_parallel", "test_vocab_parallel_loss_values"): IsolatedCheck(
        CH06_VOCAB + "check_vocab_parallel_loss_values_hidden", ("vocab_parallel_cross_entropy",)),
    ("06_tensor_parallel", "test_vocab_parallel_loss_gradients"): IsolatedCheck(
        CH06_VOCAB + "check_vocab_parallel_loss_gradients_hidden", ("vocab_parallel_cross_entropy",)),
    ("06_tensor_parallel", "test_vocab_parallel_loss_traffic"): IsolatedCheck(
        CH06_VOCAB + "check_vocab_parallel_loss_traffic_hidden", ("vocab_parallel_cross_entropy",)),
    ("08_nd_parallelism", "test_mesh_coordinates"): IsolatedCheck(
        CH08 + "check_mesh_coordinates_hidden", ("mesh_coordinates",)),
    ("08_nd_parallelism", "test_mesh_groups"): IsolatedCheck(
        CH08 + "check_mesh_groups_hidden", ("mesh_groups",)),
    ("08_nd_parallelism", "test_mesh_matches_torch"): IsolatedCheck(
        CH08 + "check_mesh_matches_torch_hidden", ("mesh_coordinates", "mesh_groups")),
    ("08_nd_parallelism", "test_groups_inside_node"): IsolatedCheck(
        CH08 + "check_groups_inside_node_hidden", ("groups_inside_node",)),
    ("08_nd_parallelism", "test_mesh_bad_shapes"): IsolatedCheck(
        CH08 + "check_mesh_bad_shapes_hidden", ("mesh_coordinates", "mesh_groups", "groups_inside_node")),
    ("08_nd_parallelism", "test_capstone_groups"): IsolatedCheck(
        CH08_CAPSTONE + "check_capstone_groups_hidden", ("capstone_groups",)),
    ("08_nd_parallelism", "test_build_stage"): IsolatedCheck(
        CH08_CAPSTONE + "check_build_stage_hidden", ("build_stage",)),
    ("08_nd_parallelism", "test_capstone_loss"): IsolatedCheck(
        CH08_CAPSTONE + "check_capstone_loss_hidden", ("capstone_groups", "build_stage", "capstone_step")),
    ("03_data_parallel", "test_ddp_broadcast"): IsolatedCheck(CH03 + "check_ddp_broadcast_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_gradients"): IsolatedCheck(CH03 + "check_ddp_gradients_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_frozen_and_tied"): IsolatedCheck(
        CH03 + "check_ddp_frozen_and_tied_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_unused_parameters"): IsolatedCheck(
        CH03 + "check_ddp_unused_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_overlap"): IsolatedCheck(CH03 + "check_ddp_overlap_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_buckets"): IsolatedCheck(CH03 + "check_ddp_buckets_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_overlap_buckets"): IsolatedCheck(
        CH03 + "check_ddp_overlap_buckets_hidden", ("DDP",)),
    ("03_data_parallel", "test_ddp_one_rank"): IsolatedCheck(CH03 + "check_ddp_one_rank_hidden", ("DDP",)),
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
    ("02_collectives", "test_predict_gloo_all_reduce"): IsolatedCheck(
        CH02_PREDICT + "check_predict_hidden", ("predict_gloo_all_reduce",)),
    ("02_collectives", "test_predict_gloo_own_formula"): IsolatedCheck(
        CH02_PREDICT + "check_predict_own_formula", ("predict_gloo_all_reduce",)),
    ("09_on_the_cluster", "test_checkpoint_round_trip"): IsolatedCheck(
        CH09 + "check_round_trip_hidden", CH09_STORAGE),
    ("09_on_the_cluster", "test_checkpoint_atomic"): IsolatedCheck(
        CH09 + "check_atomic_hidden", CH09_STORAGE),
    ("09_on_the_cluster", "test_resume_after_sigkill"): IsolatedCheck(
        CH09 + "check_resume_after_sigkill_hidden", ("train",)),
    ("09_on_the_cluster", "test_resume_after_sigterm"): IsolatedCheck(
        CH09 + "check_resume_after_sigterm_hidden", ("train",)),
    ("09_on_the_cluster", "test_resume_on_new_world_size"): IsolatedCheck(
        CH09 + "check_resume_on_new_world_size_hidden", ("train",)),
    ("10_context_parallel", "test_zigzag_positions"): IsolatedCheck(
        CH10 + "check_zigzag_positions_hidden", ("zigzag_positions",)),
    ("10_context_parallel", "test_ring_attention_values"): IsolatedCheck(
        CH10 + "check_ring_attention_values_hidden", ("ring_attention",)),
    ("10_context_parallel", "test_ring_attention_causal"): IsolatedCheck(
        CH10 + "check_ring_attention_causal_hidden", ("ring_attention",)),
    ("10_context_parallel", "test_ring_attention_zigzag"): IsolatedCheck(
        CH10 + "check_ring_attention_zigzag_hidden", ("ring_attention",)),
    ("10_context_parallel", "test_ring_attention_traffic"): IsolatedCheck(
        CH10 + "check_ring_attention_traffic_hidden", ("ring_attention",)),
    ("10_context_parallel", "test_ring_attention_skips_masked"): IsolatedCheck(
        CH10 + "check_ring_attention_skips_masked_hidden", ("ring_attention",)),
    ("10_context_parallel", "test_ring_attention_stable"): IsolatedCheck(
        CH10 + "check_ring_attention_stable_hidden", ("ring_attention",)),
    ("11_expert_parallel", "test_expert_parallel_values"): IsolatedCheck(
        CH11 + "check_expert_parallel_values_hidden", EP),
    ("11_expert_parallel", "test_expert_parallel_gradients"): IsolatedCheck(
        CH11 + "check_expert_parallel_gradients_hidden", EP),
    ("11_expert_parallel", "test_expert_parallel_traffic"): IsolatedCheck(
        CH11 + "check_expert_parallel_traffic_hidden", EP),
    ("11_expert_parallel", "test_expert_parallel_capacity"): IsolatedCheck(
        CH11 + "check_expert_parallel_capacity_hidden", EP),
}
