"""Chapter 04's stage split as the exercise states it: a split's stage times, memory and step under GPipe.

Plain arithmetic on a case (per-layer costs, stages, micro-batches, memory limit): each stage's sums and
peak memory. Nothing here models the step or searches for a split: the step a split is graded on is the
course simulator's GPipe makespan (judge.py plays it), and the best step is the instructor's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

NAME = "split_stages"


@dataclass(frozen=True)
class Case:
    """One model to split: per layer (in order), its forward and backward time per micro-batch (ms), the
    bytes it holds for the whole step (weights, gradients, optimizer state: GB) and the activation bytes
    one micro-batch leaves on it from its forward until its backward (GB)."""

    forward: tuple
    backward: tuple
    state: tuple
    activation: tuple
    stages: int
    microbatches: int
    memory_limit: float      # GB per stage
    name: str = ""

    @property
    def layers(self) -> int:
        return len(self.forward)

    def arguments(self) -> dict:
        """What the student's function is called with (plain lists: a fresh copy per call)."""
        plain = asdict(self)
        plain.pop("name")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in plain.items()}

    def describe(self) -> str:
        return (f"{self.name + ': ' if self.name else ''}{self.layers} layers, stages={self.stages}, "
                f"microbatches={self.microbatches}, memory_limit={self.memory_limit:g} GB")


def stage_ranges(starts, layers: int) -> list[range]:
    """The layers of each stage, from the index of each stage's first layer."""
    ends = [*starts[1:], layers]
    return [range(a, b) for a, b in zip(starts, ends, strict=True)]


def structure_problems(case: Case, starts) -> list[str]:
    """A split is a list of ``stages`` ints: 0 first, strictly increasing, every one a layer index."""
    where = case.describe()
    if not isinstance(starts, list) or not all(type(s) is int for s in starts):
        return [f"{where}: expected a list of {case.stages} ints (the index of each stage's first layer), "
                f"got {str(starts)[:100]}"]
    if len(starts) != case.stages:
        return [f"{where}: expected {case.stages} stage starts, got {len(starts)}: {starts}"]
    if starts[0] != 0:
        return [f"{where}: stage 0 must start at layer 0 (every layer belongs to a stage), got {starts}"]
    if any(b <= a for a, b in zip(starts, starts[1:], strict=False)) or starts[-1] >= case.layers:
        return [f"{where}: the starts {starts} must increase strictly and stay below {case.layers}, so that "
                f"every stage holds at least one layer"]
    return []


def stage_times(case: Case, starts) -> tuple[list[float], list[float]]:
    """Per stage, its forward and backward time for one micro-batch (the sums over its layers)."""
    ranges = stage_ranges(starts, case.layers)
    return ([sum(case.forward[i] for i in r) for r in ranges],
            [sum(case.backward[i] for i in r) for r in ranges])


def stage_memory(case: Case, starts) -> list[float]:
    """Per stage, the most it holds at once under GPipe: its state, and every micro-batch's activations
    (all forwards run before the first backward)."""
    return [sum(case.state[i] for i in r) + case.microbatches * sum(case.activation[i] for i in r)
            for r in stage_ranges(starts, case.layers)]


def stage_table(case: Case, starts) -> str:
    """One line per stage: its layers, times and memory against the limit."""
    forward, backward = stage_times(case, starts)
    memory = stage_memory(case, starts)
    lines = []
    for s, r in enumerate(stage_ranges(starts, case.layers)):
        over = "  OVER THE LIMIT" if memory[s] > case.memory_limit * (1 + 1e-9) else ""
        lines.append(f"stage {s}: layers {r.start:2d}-{r.stop - 1:2d}, forward {forward[s]:6.2f} ms, "
                     f"backward {backward[s]:6.2f} ms, memory {memory[s]:6.2f} GB{over}")
    return "\n".join(lines)


def transformer_case(blocks: int, stages: int, microbatches: int, memory_limit: float, *, head: float = 2.4,
                     block_times=None, recomputed=(), name: str = "") -> Case:
    """An embedding, ``blocks`` transformer blocks and an output layer with its loss, in the proportions of
    Llama 3 8B (Dubey et al. 2024, Table 3: 4,096 wide; 128,256 tokens in the released configuration, which
    Table 3 rounds to 128,000): a block ~218 M parameters, the embedding and the untied output layer ~525 M
    each, so the output layer's matmul costs ``head`` (2.4) blocks' and the embedding a lookup. State is 16
    bytes a parameter (Adam, mixed precision); a block leaves 0.5 GB of activations per micro-batch, the
    output layer its logits (1 GB), the embedding little. ``block_times`` (forward ms per block) varies the
    blocks. The backward differs by layer: the embedding's (a scatter into its table) costs its forward, a
    block's twice its forward, and a block in ``recomputed`` (indices among the blocks) reruns its forward
    in the backward (three times its forward) and keeps only its input (0.034 GB: 4,096 tokens x 4,096
    wide in bf16)."""
    times = list(block_times) if block_times is not None else [1.0] * blocks
    again = set(recomputed)
    forward = [0.05, *times, head]
    backward = [0.05, *((3 if i in again else 2) * t for i, t in enumerate(times)), 2 * head]
    state = [8.4, *([3.5] * blocks), 8.4]
    activation = [0.05, *(0.034 if i in again else 0.5 for i in range(blocks)), 1.0]
    return Case(tuple(round(x, 4) for x in forward), tuple(round(x, 4) for x in backward), tuple(state),
                tuple(activation), stages, microbatches, memory_limit, name)
