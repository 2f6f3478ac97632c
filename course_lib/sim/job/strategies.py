"""The named strategies of the course as simulate_training_step options, from 0D to 4D.

``simulate_training_step(model, cluster, **strategy("ddp", world_size=8))`` plays one by name.
"""

from __future__ import annotations

from ..checks import whole

STRATEGIES = {
    "single_device": ("one device does everything", {}),
    "parameter_server": ("data parallel; gradients summed through one rank after the backward",
                         {"dp": "N", "dp_algorithm": "parameter_server", "overlap": False}),
    "ring_all_reduce": ("data parallel; one ring all-reduce after the backward",
                        {"dp": "N", "overlap": False}),
    "ddp": ("data parallel; 25 MiB gradient buckets all-reduced while the backward runs",
            {"dp": "N", "overlap": True}),
    "naive_model_parallel": ("layers split over devices, one micro-batch: one device works at a time",
                             {"pp": "N", "microbatches": 1, "schedule": "gpipe"}),
    "gpipe": ("pipeline, all forwards then all backwards", {"pp": "N", "microbatches": "4N",
                                                            "schedule": "gpipe"}),
    "1f1b": ("pipeline, one forward one backward", {"pp": "N", "microbatches": "4N", "schedule": "1f1b"}),
    "interleaved_1f1b": ("pipeline with 2 chunks per device", {"pp": "N", "microbatches": "4N",
                                                               "schedule": "interleaved_1f1b",
                                                               "virtual_stages": 2}),
    "tensor_parallel": ("Megatron: 2 all-reduces forward and 2 backward per layer", {"tp": "N"}),
    "zero1": ("data parallel, optimizer states sharded", {"dp": "N", "zero_stage": 1}),
    "zero2": ("data parallel, optimizer states and gradients sharded", {"dp": "N", "zero_stage": 2}),
    "zero3": ("data parallel, everything sharded (FSDP)", {"dp": "N", "zero_stage": 3}),
    "fsdp": ("same as zero3: all-gather before forward and backward, reduce-scatter gradients",
             {"dp": "N", "zero_stage": 3}),
}


def strategy(name: str, world_size: int) -> dict:
    """simulate_training_step keyword arguments of strategy ``name`` on ``world_size`` devices."""
    if not isinstance(name, str) or name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; use one of {', '.join(STRATEGIES)}")
    world_size = whole("world_size", world_size)
    if name == "single_device" and world_size != 1:
        raise ValueError("single_device runs on world_size=1; pick another strategy for more devices")
    sizes = {"N": world_size, "4N": 4 * world_size}
    options = {k: sizes.get(v, v) if isinstance(v, str) else v for k, v in STRATEGIES[name][1].items()}
    if "microbatches" in options:
        options["global_batch"] = options["microbatches"]
    return options
