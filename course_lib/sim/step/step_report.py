"""The StepReport of simulate_training_step: step time, timeline, memory per device, MFU, tokens/s.

MFU follows Chowdhery et al. 2022 (PaLM, Appendix B): model FLOPs per second over the peak FLOP/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GB = 1e9


@dataclass
class StepReport:
    config: object
    cluster: object
    timeline: object
    step_time: float
    memory_per_stage: list
    stage_of_rank: list = field(repr=False)
    model_flops: float = 0.0
    tokens: float = 0.0

    @property
    def memory_per_device(self) -> list:
        """One MemoryBreakdown per rank (ranks of one pipeline stage share theirs)."""
        return [self.memory_per_stage[s] for s in self.stage_of_rank]

    @property
    def peak_memory(self) -> float:
        return max(m.total for m in self.memory_per_stage)

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, a fraction: training FLOPs / (step time x devices x peak FLOP/s)."""
        peak = self.cluster.preset.mfu_flops * self.cluster.world_size
        return self.model_flops / (self.step_time * peak) if self.step_time > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.step_time if self.step_time > 0 else 0.0

    @property
    def collective_algorithms(self) -> dict:
        """{data-parallel collective: the algorithm it ran}, read off rank 0's timeline labels: NCCL's
        choice where the config leaves it to NCCL (dp_algorithm="nccl", the default)."""
        found = {}
        for event in self.timeline.events(0):
            if event.kind == "comm" and event.label.endswith(")") and ", " in event.label:
                op = next((o for o in ("all_reduce", "reduce_scatter", "all_gather") if o in event.label
                           or o.replace("_", "-") in event.label), None)
                if op is not None:
                    found.setdefault(op, event.label.rsplit(", ", 1)[1][:-1])
        return found

    @property
    def bubble_fraction(self) -> float:
        return self.timeline.bubble_fraction

    def summary(self) -> str:
        c = self.config
        layout = f"dp={c.dp} tp={c.tp} pp={c.pp} cp={c.cp} zero={c.zero_stage} microbatches={c.microbatches}"
        cluster = self.cluster
        return (f"{getattr(c.model, 'name', 'model')} on {cluster.world_size} x {cluster.preset.name} "
                f"({layout}): step {self.step_time:.4g} s, MFU {100 * self.mfu:.1f} %, "
                f"{self.tokens_per_second:,.0f} tokens/s, idle {100 * self.bubble_fraction:.1f} %, "
                f"peak memory {self.peak_memory / GB:.1f} GB of "
                f"{cluster.preset.usable_memory / GB:.0f} GB usable")

    def __repr__(self) -> str:
        return f"StepReport({self.summary()})"
