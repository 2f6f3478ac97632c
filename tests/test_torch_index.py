"""`make setup` picks PyTorch's CPU build by itself on a Linux x86-64 machine without an NVIDIA GPU, and
never waits long on a network that reaches only PyPI (tools/torch_index.py's decision, no download)."""

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tools.torch_index import AUTO, CPU_INDEX, Machine, choose, index_reachable

ROOT = Path(__file__).resolve().parent.parent
LINUX_NO_GPU = Machine("Linux", "x86_64", has_nvidia_gpu=False)


def always(answer):
    return lambda: answer


def test_linux_without_gpu_takes_the_cpu_build():
    assert choose(AUTO, LINUX_NO_GPU, reachable=always(True)).index == CPU_INDEX


@pytest.mark.parametrize("machine", [Machine("Linux", "x86_64", True), Machine("Darwin", "arm64", False),
                                     Machine("Linux", "aarch64", False)])
def test_machines_whose_pypi_build_is_right_keep_pypi(machine):
    def must_not_probe():
        raise AssertionError("no reason to ask the CPU index here")
    assert choose(AUTO, machine, reachable=must_not_probe).index == ""


def test_unreachable_cpu_index_falls_back_to_pypi_and_says_so():
    choice = choose(AUTO, LINUX_NO_GPU, reachable=always(False))
    assert choice.index == "" and "cannot be reached" in choice.why


@pytest.mark.parametrize("given", ["", "https://mirror.example/whl/cpu"])
def test_an_explicit_torch_index_wins(given):
    assert choose(given, LINUX_NO_GPU, reachable=always(True)).index == given


def test_probe_gives_up_within_its_bound_on_a_silent_server():
    with socket.socket() as server:                      # accepts the connection, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        started = time.perf_counter()
        assert not index_reachable(f"http://127.0.0.1:{server.getsockname()[1]}/", seconds=0.5)
        assert time.perf_counter() - started < 2.0


def test_probe_answers_no_at_once_when_refused():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]                    # bound, not listening: connections are refused
        started = time.perf_counter()
        assert not index_reachable(f"http://127.0.0.1:{port}/", seconds=3.0)
        assert time.perf_counter() - started < 1.0


def test_probe_says_yes_to_a_server_that_answers():
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Ok(BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert index_reachable(f"http://127.0.0.1:{server.server_port}/", seconds=3.0)
    finally:
        server.shutdown()


def test_make_setup_asks_the_chooser():
    plan = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True).stdout
    assert 'tools/torch_index.py "auto"' in plan and "--extra-index-url" in plan
