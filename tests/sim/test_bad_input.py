"""Bad input to the simulator's public functions: always a ValueError that names what to change.

Never a ZeroDivisionError, TypeError or AttributeError from deep inside, and never a silent NaN or [].
"""

import math

import numpy as np
import pytest

from course_lib import sim

SMALL = sim.TransformerSpec(8, 256, 8, 128, 1000, name="small")
NAN = math.nan


def cluster(gpus=8):
    return sim.make_cluster(1, gpus)


STEP_CASES = [
    (dict(pp=2, dp=4, microbatches=8, schedule="interleaved_1f1b", virtual_stages=0), "virtual_stages"),
    (dict(pp=2, dp=4, microbatches=8, schedule="interleaved_1f1b", virtual_stages=2.5), "virtual_stages"),
    (dict(dp=8, virtual_stages=0), "virtual_stages"),
    (dict(dp=8, bogus=1), "unknown option.*bogus.*valid options.*virtual_stages"),
    (dict(dp=8, zero_stage=True), "zero_stage"),
    (dict(dp=8, zero_stage=1.0), "zero_stage"),
    (dict(dp=8, param_bytes=NAN), "param_bytes"),
    (dict(dp=8, optimizer_bytes=-1), "optimizer_bytes"),
    (dict(dp=8, bucket_bytes=NAN), "bucket_bytes"),
    (dict(dp=8, overlap="no"), "overlap"),
    (dict(dp=8, prefetch=None), "prefetch"),
    (dict(dp=4, tp=2, sequence_parallel="yes"), "sequence_parallel"),
    (dict(dp=8, placement="tp cp dp pp"), "placement"),
    (dict(dp=8, schedule=["1f1b"]), "schedule"),
    (dict(dp=8, check_memory="no"), "check_memory"),
]


@pytest.mark.parametrize("kwargs,match", STEP_CASES)
def test_simulate_training_step_refuses_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sim.simulate_training_step(SMALL, cluster(), **kwargs)


def test_memory_per_device_names_unknown_options_too():
    with pytest.raises(ValueError, match="unknown option.*bogus"):
        sim.memory_per_device(SMALL, dp=8, bogus=1)


def test_a_model_or_cluster_of_the_wrong_kind_is_named():
    with pytest.raises(ValueError, match="model"):
        sim.simulate_training_step(None, cluster(), dp=8)
    with pytest.raises(ValueError, match="cluster"):
        sim.simulate_training_step(SMALL, "8 GPUs", dp=8)


def test_numpy_integers_from_a_slider_are_whole_numbers():
    report = sim.simulate_training_step(SMALL, cluster(), dp=np.int64(8), zero_stage=np.int64(1))
    assert report.step_time > 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(kv_heads=0), "kv_heads"), (dict(kv_heads=-2), "kv_heads"), (dict(kv_heads=3), "kv_heads"),
    (dict(kv_heads=2.0), "kv_heads"), (dict(ffn_hidden=2.5), "ffn_hidden"),
    (dict(ffn_hidden="a"), "ffn_hidden"),
    (dict(name=None), "name"),
])
def test_transformer_spec_refuses_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sim.TransformerSpec(8, 256, 8, 128, 1000, **kwargs)


def test_model_counts_refuse_nan():
    with pytest.raises(ValueError, match="tokens"):
        SMALL.training_flops(NAN)
    with pytest.raises(ValueError, match="sizes"):
        sim.MLPSpec((6, True, 2))


@pytest.mark.parametrize("call,match", [
    (lambda: sim.seed_1d(0), "world_size"),
    (lambda: sim.seed_1d(2.0), "world_size"),
    (lambda: sim.seed_1d(4, items=-4), "items"),
    (lambda: sim.seed_1d(4, gradient_units=NAN), "gradient_units"),
    (lambda: sim.seed_0d(items=-1), "items"),
    (lambda: sim.seed_0d(items=2.5), "items"),
    (lambda: sim.seed_0d(units_per_item=NAN), "units_per_item"),
    (lambda: sim.simulated_gpus(2.0), "world_size"),
    (lambda: sim.simulated_gpus("2"), "world_size"),
    (lambda: sim.SimulatedGPU(0, seconds_per_compute_unit=NAN), "seconds_per_compute_unit"),
    (lambda: sim.SimulatedGPU(-1), "rank"),
    (lambda: sim.SimulatedGPU(0).compute("x", NAN), "compute_units"),
    (lambda: sim.SimulatedGPU(0).compute("x", "3"), "compute_units"),
    (lambda: sim.SimulatedGPU(0).send(1, "x", NAN), "data_size_units"),
])
def test_seed_simulator_refuses_bad_sizes(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("call,match", [
    (lambda: sim.Link(NAN, NAN), "latency"),
    (lambda: sim.Link(1e-6, NAN), "bandwidth"),
    (lambda: sim.Link(math.inf, 1e9), "latency"),
    (lambda: sim.Link("fast", 1e9), "latency"),
    (lambda: sim.Link().transfer_time(NAN), "nbytes"),
    (lambda: sim.HardwarePreset("x", NAN, 80e9, sim.Link(), sim.Link()), "flops"),
    (lambda: sim.HardwarePreset("x", 1e12, 80e9, "nvlink", sim.Link()), "intra_node"),
    (lambda: sim.preset_from_measurements(NAN, 1e9, 1e-6, 1e9), "flops"),
    (lambda: sim.zero_memory_per_device(NAN, 8, 1), "num_params"),
    (lambda: sim.zero_memory_per_device(math.inf, 8, 1), "num_params"),
    (lambda: sim.zero_memory_per_device(1e9, 8, 1, param_bytes=NAN), "param_bytes"),
    (lambda: sim.zero_memory_per_device("1e9", 8, 1), "num_params"),
    (lambda: sim.zero_memory_per_device(1e9, 8, 1.0), "stage"),
    (lambda: sim.zero_traffic_per_device(1e9, 8, 1, param_bytes=-1), "param_bytes"),
    (lambda: sim.zero_traffic_per_device(1e9, 8, 1, grad_bytes=NAN), "grad_bytes"),
    (lambda: sim.collective_time("all_reduce", 1e6, 4, None), "link"),
])
def test_hardware_and_memory_refuse_nan_and_wrong_types(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_an_ideal_link_of_infinite_bandwidth_is_allowed():
    assert sim.Link(0.0, math.inf).transfer_time(1e9) == 0.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(global_batch=0), "global_batch"), (dict(global_batch=-8), "global_batch"),
    (dict(global_batch=8.0), "global_batch"), (dict(global_batch=8, zero_stages=(5,)), "zero_stages"),
    (dict(global_batch=8, schedule="zigzag"), "schedule"), (dict(global_batch=8, max_tp=0), "max_tp"),
    (dict(global_batch=8, recompute="most"), "recompute"), (dict(global_batch=8, cps=(0,)), "cps"),
])
def test_search_layouts_refuses_instead_of_returning_nothing(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sim.search_layouts(SMALL, cluster(), **kwargs)


def test_search_layouts_explains_when_no_layout_can_run():
    rows = sim.search_layouts(SMALL, cluster(), global_batch=8)
    assert rows and all(r["dp"] * r["microbatches"] == 8 for r in rows)
    with pytest.raises(ValueError, match="no DP x TP x PP x CP layout of 8 GPUs"):
        sim.search_layouts(SMALL, cluster(), global_batch=8, cps=(3,))


@pytest.mark.parametrize("call,match", [
    (lambda: sim.simulate_pipeline(sim.pipeline_schedule("1f1b", 2, 4), ["1", "2"], 1), "t_forward"),
    (lambda: sim.simulate_pipeline(sim.pipeline_schedule("1f1b", 2, 4), math.inf, 1), "t_forward"),
    (lambda: sim.simulate_pipeline(sim.pipeline_schedule("1f1b", 2, 4), 1, 1, "0"), "t_comm"),
    (lambda: sim.simulate_pipeline("1f1b", 1, 2), "Schedule"),
    (lambda: sim.activation_memory_per_layer(None, 1), "spec"),
    (lambda: sim.activation_memory_per_layer(SMALL, 1, tp=2, sequence_parallel="no"), "sequence_parallel"),
    (lambda: sim.Cluster(1, 8, "h100"), "HardwarePreset"),
    (lambda: sim.strategy(["ddp"], 4), "unknown strategy"),
    (lambda: sim.bus_bandwidth("all_reduce", 1e6, "1", 4), "seconds"),
    (lambda: sim.ring_timeline("all_reduce", 4, 1e6, None), "link"),
    (lambda: sim.tree_timeline("all_reduce", 4, 1e6, sim.Link(), root="0"), "root"),
    (lambda: sim.SimulatedGPU(0).receive(0, "x", 1), "itself"),
    (lambda: sim.memory_per_device(SMALL, dp=None), "dp"),
])
def test_other_public_functions_name_their_bad_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_numpy_integers_work_across_the_public_functions():
    two = np.int64(2)
    assert sim.make_cluster(two, 8).world_size == 16
    assert sim.pipeline_schedule("1f1b", two, 4).stages == 2
    assert sim.strategy("ddp", np.int64(4))["dp"] == 4
    assert sim.activation_memory_per_layer(SMALL, two) > 0
