"""From a simulated step to the wall-clock GPU-hours a paper reports: the batch-size ramp and the share of
the wall-clock time a job trains, each only from a stated source, never fitted to the figure compared with.

A step time is one steady-state step; a report's GPU-hours cover the whole pre-training (the ramp,
restarts after failures, checkpoints, evaluation). This file keeps the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass

# Llama 3 (Dubey et al. 2024, arXiv 2407.21783, section 3.3.4): "higher than 90% effective training time"
# during a 54-day snapshot of its pre-training. Another production report's figure, named as such: the
# DeepSeek-V3 report gives none for its own run.
LLAMA3_EFFECTIVE_TRAINING_SHARE = 0.90

# DeepSeek-V3 (arXiv 2412.19437, section 4.2): the batch grows "from 3072 to 15360 in the training of the
# first 469B tokens, and then keeps 15360 in the remaining training", of 14.8T tokens (section 1).
DEEPSEEK_RAMP = (3072, 15360, 469e9)
DEEPSEEK_TOKENS = 14.8e12


@dataclass(frozen=True)
class WallClock:
    """GPU-hours per trillion tokens: the steady step's, with the ramp, and over the training share."""

    steady: float            # every step at the final batch (what a step time gives)
    with_ramp: float         # the ramp's tokens at the cost of its mean batch
    wall_clock: float        # with_ramp / the effective-training share
    share: float
    share_source: str

    def gap(self, published: float) -> float:
        return self.wall_clock / published - 1


def wall_clock_hours(run, share: float = LLAMA3_EFFECTIVE_TRAINING_SHARE,
                     share_source: str = "Llama 3, section 3.3.4 (another production run)") -> WallClock:
    """DeepSeek-V3's simulated GPU-hours per trillion tokens, steady, with its ramp, and as wall-clock time.

    The ramp's tokens are charged at its mean batch (a linear ramp over tokens averages (first + last)/2),
    rounded to whole micro-batches per replica; the effective-training share divides the rest.
    """
    from ..cluster.topology import make_cluster
    from ..step.training_step import simulate_training_step
    from .published import gpu_hours_per_trillion_tokens

    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], the fraction of wall-clock time spent training; "
                         f"got {share!r}")
    cluster = make_cluster(run.gpus // 8, 8, preset=run.preset)
    steady = gpu_hours_per_trillion_tokens(simulate_training_step(run.model, cluster, **run.layout))
    first, last, ramp_tokens = DEEPSEEK_RAMP
    dp = run.layout["dp"]
    mean_batch = round((first + last) / 2 / dp) * dp
    ramp_layout = dict(run.layout, global_batch=mean_batch, microbatches=mean_batch // dp)
    ramp = gpu_hours_per_trillion_tokens(simulate_training_step(run.model, cluster, **ramp_layout))
    part = ramp_tokens / DEEPSEEK_TOKENS
    with_ramp = (1 - part) * steady + part * ramp
    return WallClock(steady, with_ramp, with_ramp / share, share, share_source)
