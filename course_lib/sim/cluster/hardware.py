"""Hardware descriptions the simulator runs on: per-device presets and the alpha-beta links they name.

A preset can come from a data sheet (its source named) or from measurements on this machine
(``course_lib.real.calibrate()`` builds one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import amount, whole
from ..network.links import Link
from ..vocabulary import SEGMENTED_OPS

__all__ = ["GLOO_SEGMENT_BYTES", "HardwarePreset", "Link"]

# gloo's ring all-reduce cuts every chunk into segments of at most 1 MiB (kMaxSegmentSize in
# gloo/allreduce.h), at least two per chunk: the segment size of every preset calibrate() builds.
GLOO_SEGMENT_BYTES = 1 << 20


@dataclass(frozen=True)
class HardwarePreset:
    """One kind of device and the links between devices inside a node and across nodes."""

    name: str
    flops: float                 # sustained dense FLOP/s of one device (bf16 for GPUs)
    memory_bytes: float          # usable memory of one device
    intra_node: Link             # device to device inside a node (NVLink, shared memory, ...)
    inter_node: Link             # node to node through ONE NIC (one InfiniBand port, Ethernet, ...)
    source: str = "measured"     # where the numbers come from: a data sheet, a paper, or "measured"
    peak_flops: float | None = None  # data-sheet peak, the denominator of MFU; None: same as flops
    # Segments of a segmented ring that travel at once with their latencies overlapping (the
    # collective_time in_flight argument): 1 unless measured, as calibrate() does.
    segments_in_flight: int = 1
    # The segments a ring cuts each chunk into where this preset's collectives run as a segmented ring
    # (gloo's, GLOO_SEGMENT_BYTES, on a calibrated machine); None: collective_time's closed forms.
    # One model per quantity: every prediction on the preset asks ring_options for it.
    segment_bytes: float | None = None
    # NICs of a node that collectives use (rail-optimised: one per GPU); None means one per device.
    # Across nodes a group gets min(its members per node, nics_per_node) x inter_node.bandwidth.
    nics_per_node: int | None = None
    # Memory (HBM) bytes per second of one device: what the non-matmul layers (norms, softmax, dropout,
    # activations, residual adds) run at. None: those layers are not costed (their time is folded in flops).
    memory_bandwidth: float | None = None
    # FP8 matrix multiplies (Hopper): the sustained and the data-sheet rate; None where there is no FP8.
    fp8_flops: float | None = None
    fp8_peak_flops: float | None = None
    # Bytes of each device's memory that the model never gets: the CUDA context and library workspaces,
    # NCCL's communication buffers, the allocator's fragmentation (presets.py says how much, and why).
    memory_reserve: float = 0.0
    # What calibrate() measured, when the preset is this machine (a course_lib.sim.cluster.laptop
    # Calibration; laptop_preset builds the preset from it); None for a data-sheet preset.
    calibration: object = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        amount(f"preset {self.name!r}: flops", self.flops, positive=True, unit="FLOP/s")
        amount(f"preset {self.name!r}: memory_bytes", self.memory_bytes, positive=True, unit="bytes")
        for name in ("intra_node", "inter_node"):
            if not isinstance(getattr(self, name), Link):
                raise ValueError(f"preset {self.name!r}: {name} must be a Link(latency, bandwidth), "
                                 f"got {getattr(self, name)!r}")
        if self.peak_flops is not None:
            amount(f"preset {self.name!r}: peak_flops", self.peak_flops, positive=True, unit="FLOP/s")
        whole(f"preset {self.name!r}: segments_in_flight", self.segments_in_flight)
        if self.segment_bytes is not None:
            amount(f"preset {self.name!r}: segment_bytes", self.segment_bytes, positive=True, unit="bytes")
        if self.nics_per_node is not None:
            whole(f"preset {self.name!r}: nics_per_node", self.nics_per_node)
        if self.memory_bandwidth is not None:
            amount(f"preset {self.name!r}: memory_bandwidth", self.memory_bandwidth, positive=True,
                   unit="bytes/s")
        for name in ("fp8_flops", "fp8_peak_flops"):
            if getattr(self, name) is not None:
                amount(f"preset {self.name!r}: {name}", getattr(self, name), positive=True, unit="FLOP/s")
        amount(f"preset {self.name!r}: memory_reserve", self.memory_reserve, unit="bytes")
        if self.memory_reserve >= self.memory_bytes:
            raise ValueError(f"preset {self.name!r}: memory_reserve ({self.memory_reserve:g}) leaves nothing "
                             f"of memory_bytes ({self.memory_bytes:g}) for the model")
        if self.peak_flops is not None and self.peak_flops < self.flops:
            raise ValueError(f"preset {self.name!r}: peak_flops ({self.peak_flops:g}) is below the "
                             f"sustained flops ({self.flops:g}); peak must be >= sustained")

    @property
    def usable_memory(self) -> float:
        """Bytes a training job can plan with: the device's memory less its reserve."""
        return self.memory_bytes - self.memory_reserve

    @property
    def mfu_flops(self) -> float:
        """FLOP/s that MFU divides by: the peak when known, else the sustained rate."""
        return self.peak_flops if self.peak_flops is not None else self.flops

    def ring_options(self, op: str, algorithm: str = "nccl") -> dict:
        """``collective_time``'s ``segment_bytes`` and ``in_flight`` for ``op`` run with ``algorithm`` on
        this preset: the segmented ring it was calibrated as, where it has one and the op is a ring's
        (the default algorithm, or the ring by name); nothing, so the closed form, otherwise (a data
        sheet's preset, an algorithm asked for by name, an op gloo's ring does not run)."""
        if self.segment_bytes is None or op not in SEGMENTED_OPS or algorithm not in ("nccl", "ring"):
            return {}
        return {"segment_bytes": self.segment_bytes, "in_flight": self.segments_in_flight}
