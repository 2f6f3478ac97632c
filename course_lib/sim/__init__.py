"""Virtual-clock cluster simulator: collectives, pipelines, memory and whole training steps, 0D to 4D.

Plain Python (no torch, no matplotlib); every time is in seconds of a virtual clock, every size in bytes.
"""

from .collectives import ALGORITHMS, OPS, algorithm_bandwidth, bus_bandwidth, bus_factor, collective_time
from .hardware import HardwarePreset, Link
from .presets import A100, H100, LAPTOP_CPU, PRESETS, get_preset, preset_from_measurements
from .seed_examples import seed_0d, seed_1d
from .seed_gpu import SimulatedGPU, SimulatedNetwork, simulated_gpus
from .timeline import Event, Timeline
from .topology import Cluster, make_cluster

__all__ = [
    "A100", "ALGORITHMS", "Cluster", "Event", "H100", "HardwarePreset", "LAPTOP_CPU", "Link", "OPS",
    "PRESETS", "SimulatedGPU", "SimulatedNetwork", "Timeline", "algorithm_bandwidth", "bus_bandwidth",
    "bus_factor", "collective_time", "get_preset", "make_cluster", "preset_from_measurements", "seed_0d",
    "seed_1d", "simulated_gpus",
]
