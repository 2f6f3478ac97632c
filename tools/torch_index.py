"""Choose where pip takes PyTorch from at set-up: `make setup` runs this with the system Python.

On Linux x86-64, PyPI's torch bundles CUDA (gigabytes); a machine without an NVIDIA GPU wants PyTorch's
CPU build instead. Prints the extra index URL to use (or nothing) and, on stderr, why.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_URL = CPU_INDEX + "/torch/"
PROBE_SECONDS = 3.0          # a machine that reaches only PyPI must not wait long for the answer "no"
AUTO = "auto"


@dataclass(frozen=True)
class Machine:
    system: str               # platform.system(): Linux, Darwin, Windows
    arch: str                 # platform.machine(): x86_64, aarch64, arm64, AMD64
    has_nvidia_gpu: bool


@dataclass(frozen=True)
class Choice:
    index: str                # the extra index URL for pip, or "" for PyPI alone
    why: str


def this_machine() -> Machine:
    nvidia = (Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidia0").exists()
              or shutil.which("nvidia-smi") is not None)
    return Machine(platform.system(), platform.machine().lower(), nvidia)


def wants_cpu_build(machine: Machine) -> bool:
    """Only Linux x86-64 without an NVIDIA GPU: there PyPI's wheel is the CUDA one. PyPI's macOS and
    Linux aarch64 wheels are already CPU builds (https://pytorch.org/get-started/locally/)."""
    return machine.system == "Linux" and machine.arch in ("x86_64", "amd64") and not machine.has_nvidia_gpu


def index_reachable(url: str = PROBE_URL, seconds: float = PROBE_SECONDS) -> bool:
    """Whether ``url`` answers within ``seconds``, name lookup included (which socket timeouts do not
    bound, so the request runs in a thread we stop waiting for)."""
    answer: list[bool] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=seconds) as r:
                answer.append(r.status < 400)
        except Exception:
            answer.append(False)

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(seconds)
    return bool(answer and answer[0])


def choose(requested: str, machine: Machine, reachable=index_reachable) -> Choice:
    """``requested`` is TORCH_INDEX as the user gave it: a URL, "" (PyPI alone) or "auto"."""
    if requested != AUTO:
        return Choice(requested, f"TORCH_INDEX={requested or '(empty)'} given: "
                                 + ("PyTorch also from that index" if requested else "PyTorch from PyPI"))
    if not wants_cpu_build(machine):
        reason = "an NVIDIA GPU was found" if machine.has_nvidia_gpu else "PyPI's build here has no CUDA"
        return Choice("", f"PyTorch from PyPI ({reason})")
    if not reachable():
        return Choice("", f"no NVIDIA GPU, but {CPU_INDEX} cannot be reached: PyTorch from PyPI "
                          "(set TORCH_INDEX=<a mirror of the CPU index> to avoid the CUDA build)")
    return Choice(CPU_INDEX, f"no NVIDIA GPU on this Linux machine: PyTorch's CPU build from {CPU_INDEX} "
                             "(a few hundred MB instead of several GB; TORCH_INDEX= for PyPI's)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("requested", nargs="?", default=os.environ.get("TORCH_INDEX", AUTO),
                        help='a URL, "" for PyPI alone, or "auto" (the default)')
    choice = choose(parser.parse_args(argv).requested, this_machine())
    print(f"torch: {choice.why}", file=sys.stderr)
    print(choice.index)


if __name__ == "__main__":
    main()
