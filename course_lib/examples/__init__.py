"""One runnable entry point per strategy: ``main(rank, world_size, *args)`` returning the SUMMARY dict.

Run from a notebook with ``run_ranks(ddp.main, 4)``, or on a cluster with
``torchrun --nproc-per-node 2 -m course_lib.real.launch.torchrun course_lib.examples.ddp:main``.
"""

EXAMPLES = ("single_device", "ddp", "naive_model_parallel", "pipeline", "tensor_parallel", "fsdp",
            "bus_bandwidth")
