"""course_lib.real.record.nccl_log: NCCL's line prefix and channel lines, and chapter 09's file of published
logs."""

from __future__ import annotations

import pytest

from course_lib.real.cluster.slurm_jobs import COURSE_ROOT
from course_lib.real.record.nccl_log import parse_line, read_excerpts

CHAPTER_LOG = COURSE_ROOT / "notebooks" / "09_on_the_cluster" / "nccl_debug_info.log"  # as released


def test_the_prefix_splits_into_host_process_thread_and_device():
    line = parse_line("node-3:1234:1250 [5] NCCL INFO Bootstrap : Using ib0:10.0.0.3<0>")
    assert (line.host, line.pid, line.tid, line.device, line.level) == ("node-3", 1234, 1250, 5, "INFO")
    assert line.message == "Bootstrap : Using ib0:10.0.0.3<0>" and line.channel() is None
    assert parse_line("NCCL version 2.21.5+cuda12.4") is None


@pytest.mark.parametrize("text, expected", [
    ("h:1:2 [3] NCCL INFO Channel 00/0 : 11[3] -> 3[3] [send] via NET/IB/3/GDRDMA",
     {"channel": 0, "from_rank": 11, "to_rank": 3, "direction": "send", "transport": "NET/IB/3/GDRDMA"}),
    ("h:1:2 [2] NCCL INFO Channel 02 : 10[ca000] -> 8[31000] via P2P/IPC/read",
     {"channel": 2, "from_rank": 10, "to_rank": 8, "direction": None, "transport": "P2P/IPC/read"}),
])
def test_channel_lines_name_ranks_and_transport(text, expected):
    assert parse_line(text).channel() == expected


def test_the_chapters_log_holds_sourced_excerpts_of_real_nccl_lines():
    excerpts = read_excerpts(CHAPTER_LOG)
    assert len(excerpts) == 3
    for excerpt in excerpts:
        assert excerpt.source.startswith("https://github.com/NVIDIA/nccl/issues/"), excerpt.source
        assert excerpt.notes and excerpt.lines
        unparsed = [line for line in excerpt.lines if parse_line(line) is None]
        assert all(line.startswith("NCCL version") for line in unparsed), unparsed


def test_a_file_without_sources_is_refused(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text("h:1:2 [0] NCCL INFO Init COMPLETE\n")
    with pytest.raises(ValueError, match="## source:"):
        read_excerpts(path)
