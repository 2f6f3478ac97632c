"""What chapter 09's prose says about the course's own Slurm scripts stays true of them: the table of
#SBATCH options, the srun/torchrun flags it explains, and that the scripts set no NCCL variable but
NCCL_DEBUG (from COURSE_NCCL_DEBUG)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "notebooks" / "09_on_the_cluster" / "09_on_the_cluster.ipynb"
SLURM = ROOT / "slurm"
pytestmark = pytest.mark.skipif(not SLURM.is_dir(), reason="this copy of the course has no slurm/ folder")


def markdown() -> str:
    cells = json.loads(CHAPTER.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_the_option_table_lists_exactly_the_scripts_sbatch_lines():
    script = (SLURM / "bus_bandwidth.sbatch").read_text()
    in_script = set(re.findall(r"^#SBATCH (--\S+)", script, re.M))
    in_table = set(re.findall(r"^\| `(--[^`]+)` \|", markdown(), re.M))
    assert in_table == in_script, f"table {sorted(in_table)} vs script {sorted(in_script)}"


@pytest.mark.parametrize("flag", ["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--rdzv-backend=c10d",
                                  "--max-restarts=0", "-m course_lib.real.launch.torchrun"])
def test_the_launch_line_the_chapter_explains_is_the_one_in_course_env(flag):
    assert flag in (SLURM / "course_env.sh").read_text() and flag.split("=")[0] in markdown()


def assigned_nccl_variables(text: str, commented: bool) -> set[str]:
    prefix = r"^\s*#\s*(?:export\s+)?" if commented else r"^\s*(?:export\s+)?"
    return set(re.findall(prefix + r"(NCCL_\w+)=", text, re.M))


def test_the_scripts_set_no_nccl_variable_but_nccl_debug_and_the_site_template_only_suggests_some():
    texts = {path.name: path.read_text() for path in [*SLURM.glob("*.sbatch"), *SLURM.glob("*.sh")]}
    assigned = set().union(*(assigned_nccl_variables(text, commented=False) for text in texts.values()))
    assert assigned == {"NCCL_DEBUG"}, assigned
    assert 'export NCCL_DEBUG="$COURSE_NCCL_DEBUG"' in texts["course_env.sh"]
    suggested = assigned_nccl_variables(texts["site.example.sh"], commented=True)
    assert suggested and suggested <= {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"}, suggested


# ---- the corrections of issue 31, each statement checked against what it is about -------------------------

TORCH = Path(__import__("torch").__file__).parent
C10D_HEADERS = TORCH / "include" / "torch" / "csrc" / "distributed" / "c10d"
EXCERPTS = ROOT / "solutions" / "09_on_the_cluster"
# NCCL's Environment Variables page (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): the
# section ("System configuration" or "Debugging") each variable the chapter names is listed in.
NCCL_GROUPS = {"NCCL_SOCKET_IFNAME": "system configuration", "NCCL_IB_HCA": "system configuration",
               "NCCL_DEBUG": "system configuration", "NCCL_DEBUG_SUBSYS": "system configuration",
               "NCCL_DEBUG_FILE": "system configuration", "NCCL_IB_DISABLE": "debugging",
               "NCCL_P2P_DISABLE": "debugging", "NCCL_P2P_LEVEL": "debugging", "NCCL_ALGO": "debugging",
               "NCCL_PROTO": "debugging"}


def table_groups() -> dict[str, str]:
    rows = re.findall(r"^\| (`NCCL_[^|]+) \| (system configuration|debugging) \|", markdown(), re.M)
    return {name: group for names, group in rows for name in re.findall(r"`(NCCL_\w+)`", names)}


def test_the_nccl_table_groups_each_variable_as_nccls_page_does():
    assert table_groups() == NCCL_GROUPS


def test_torch_nccl_async_error_handling_its_modes_and_its_deprecated_alias_are_torchs():
    header = (C10D_HEADERS / "ProcessGroupNCCL.hpp").read_text()
    aliases = re.search(r"TORCH_NCCL_ASYNC_ERROR_HANDLING = \{([^}]*)\}", header).group(1)
    assert re.findall(r'"(\w+)"', aliases) == ["TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"]
    assert "is deprecated; use" in (C10D_HEADERS / "Utils.hpp").read_text()
    enum = header[header.index("enum ErrorHandlingMode"):][:200]
    modes = {int(value): name for name, value in re.findall(r"(\w+) = (\d)", enum)}
    assert modes == {0: "NoHandling", 1: "TearDown", 2: "CleanUpOnly", 3: "SkipCleanUp"}
    text = " ".join(markdown().split())
    assert ("(0: nothing; 1: tear the process down; 2: abort the communicators only; 3: tear down without"
            in text)
    agent = (TORCH / "distributed" / "elastic" / "agent" / "server" / "local_elastic_agent.py").read_text()
    assert '"TORCH_NCCL_ASYNC_ERROR_HANDLING", str(1)' in agent


def test_the_old_log_is_dated_and_the_current_ones_are_nccl_2_20_or_later_with_their_sources():
    from course_lib.real.record.nccl_log import read_excerpts

    old = read_excerpts(EXCERPTS / "nccl_debug_info.log")[0]
    assert "NCCL version 2.4.8+cuda10.1" in old.lines
    assert "NCCL 2.4.8, a 2019 release" in " ".join(markdown().split())
    current = read_excerpts(EXCERPTS / "nccl_current_info.log")
    assert all(excerpt.source.startswith("https://github.com/") for excerpt in current)
    notes = " ".join(note for excerpt in current for note in excerpt.notes)
    stated = [(int(major), int(minor)) for major, minor in re.findall(r"NCCL (\d)\.(\d+)\.\d", notes)]
    assert stated and min(stated) >= (2, 20), stated
    lines = "\n".join(line for excerpt in current for line in excerpt.lines)
    for shown in ("Init START", "Init COMPLETE", "NVLS multicast support is available",
                  "RAS client listening", "nvls channels", "via NET/"):
        assert shown in lines and shown.split()[0] in markdown(), shown


def test_course_launch_runs_one_srun_task_per_node_and_torchrun_forks_the_ranks():
    env = (SLURM / "course_env.sh").read_text()
    srun = env[env.index("srun --nodes"):env.index("-m course_lib.real.launch.torchrun")]
    assert "--ntasks-per-node=1" in srun and "torch.distributed.run" in srun
    assert '--nproc-per-node="$COURSE_PROCS_PER_NODE"' in srun
    assert 'echo "$SLURM_NTASKS_PER_NODE"' in env
    row = next(line for line in markdown().splitlines() if line.startswith("| `--ntasks-per-node=2`"))
    assert "one `srun` task per node" in row and "torchrun forks" in row


def test_the_fitted_lines_intercept_is_not_two_alphas_under_chapter_02s_segment_model():
    from course_lib.real.measure.calibration import GLOO_SEGMENT_BYTES
    from course_lib.sim import Link, collective_time

    link, sizes = Link(latency=50e-6, bandwidth=1e9), [1 << 20, 1 << 21, 1 << 22, 1 << 23]
    times = [collective_time("all_reduce", size, 2, link, "ring", segment_bytes=GLOO_SEGMENT_BYTES)
             for size in sizes]
    slope = (times[-1] - times[0]) / (sizes[-1] - sizes[0])
    intercept = times[0] - slope * sizes[0]
    assert abs(intercept - 2 * link.latency) > link.latency   # the per-segment latencies went into the slope
    assert 2 * (2 - 1) * math.ceil((8 << 20) / 2 / GLOO_SEGMENT_BYTES) == 8
    text = " ".join(markdown().split())
    assert "**empirical fit**" in text and "that is 8 messages" in text
    assert "the intercept is not $2\\alpha$" in text


def test_the_models_busbw_is_at_line_rate_above_what_nccl_tests_measures():
    from course_lib.sim import bus_bandwidth, make_cluster
    from course_lib.sim.cluster.presets import NCCL_MEASURED_BUSBW

    cluster = make_cluster(nodes=2, gpus_per_node=8, preset="h100")
    busbw = bus_bandwidth("all_reduce", 2**30, cluster.collective_time("all_reduce", 2**30, range(16)), 16)
    low, high = (8 * per_nic for per_nic in NCCL_MEASURED_BUSBW["ndr_per_nic"])
    assert (low, high) == (368e9, 384e9) and busbw > high
    assert "368 to 384 GB/s" in " ".join(markdown().split())


def test_what_the_hangs_and_checkpoints_sections_say_of_torch_is_in_torch_2_13():
    from datetime import timedelta

    import torch.distributed.constants

    assert torch.distributed.constants.default_pg_timeout == timedelta(minutes=30)
    recorder = (C10D_HEADERS / "FlightRecorder.hpp").read_text()
    assert '{"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000' in recorder
    assert '"TORCH_NCCL_DUMP_ON_TIMEOUT"' in (C10D_HEADERS / "ProcessGroupNCCL.hpp").read_text()
    entry_points = next(TORCH.parent.glob("torch-*.dist-info")) / "entry_points.txt"
    assert "torchfrtrace = torch.distributed.flight_recorder.fr_trace:main" in entry_points.read_text()
    staging = (TORCH / "distributed" / "checkpoint" / "staging.py").read_text()
    saver = (TORCH / "distributed" / "checkpoint" / "state_dict_saver.py").read_text()
    async_save = saver[saver.index("def async_save("):saver.index("def _stateful_to_state_dict")]
    assert "async_stager = DefaultStager(" in async_save and "async_stager.stage(state_dict)" in async_save
    assert "class DefaultStager(AsyncStager)" in staging and "self._state_dict_stager.stage(" in staging
    text = " ".join(markdown().split())
    assert "`DefaultStager`, whose `stage` copies every tensor through a `StateDictStager`" in text
    writer = (TORCH / "distributed" / "checkpoint" / "filesystem.py").read_text()
    finish = writer[writer.index("    def finish(self, metadata"):]
    assert "self.fs.rename(tmp_path, metadata_path)" in finish[:2000]


@pytest.mark.parametrize("page, said", [
    ("sbatch", "be sent up to 60 seconds earlier than specified"),
    ("scancel", "By default, signals other than SIGKILL are not sent to the batch step"),
])
def test_what_the_preemption_section_says_of_slurm_is_in_its_manual_pages(page, said):
    manual = Path(f"/usr/share/man/man1/{page}.1.gz")
    if not manual.exists():
        pytest.skip(f"no {page} manual page here (Slurm's packages are not installed)")
    import gzip

    assert said in " ".join(gzip.decompress(manual.read_bytes()).decode(errors="replace").split())


# ---- issue 43: durable checkpoints, Slurm's signals, NCCL's defaults, sources by name ----------------------

def cells() -> list[dict]:
    return json.loads(CHAPTER.read_text())["cells"]


def test_nccls_default_timeout_is_10_minutes_and_async_error_handlings_default_is_3_outside_torchrun():
    header = (C10D_HEADERS / "ProcessGroupNCCL.hpp").read_text()
    assert "kProcessGroupNCCLDefaultTimeout =\n    std::chrono::milliseconds(10 * 60 * 1000);" in header
    assert "the default value (3 - SkipCleanUp)" in header and "SkipCleanUp = 3" in header
    c10d = (TORCH / "distributed" / "distributed_c10d.py").read_text()
    default = c10d[c10d.index("def _get_default_timeout("):][:800]
    assert "return default_pg_nccl_timeout" in default and "return default_pg_timeout" in default
    text = " ".join(markdown().split())
    assert "The default for gloo is 30 minutes" in text and "for NCCL it is 10 minutes" in text
    assert "gets PyTorch's own default, 3 (SkipCleanUp" in text
    assert "`LocalElasticAgent._start_workers`" in text
    agent = (TORCH / "distributed" / "elastic" / "agent" / "server" / "local_elastic_agent.py").read_text()
    start = agent[agent.index("    def _start_workers("):]
    assert '"TORCH_NCCL_ASYNC_ERROR_HANDLING", str(1)' in start[:3000]


def test_dcp_syncs_its_files_before_the_rename_by_default_and_never_its_folder():
    import inspect

    from torch.distributed.checkpoint import FileSystemWriter, filesystem

    assert inspect.signature(FileSystemWriter.__init__).parameters["sync_files"].default is True
    assert "os.fsync(stream.fileno())" in inspect.getsource(filesystem._write_files_from_queue)
    finish = inspect.getsource(filesystem._FileSystemWriter.finish)
    synced, renamed = "os.fsync(metadata_file.fileno())", "self.fs.rename(tmp_path, metadata_path)"
    assert finish.index(synced) < finish.index(renamed)
    source = inspect.getsource(filesystem)
    assert "O_DIRECTORY" not in source and "os.open(" not in source       # no folder is ever synced
    text = " ".join(markdown().split())
    for said in ("`FileSystemWriter(sync_files=True)`, the default", "`_write_files_from_queue`",
                 "`FileSystemWriter.finish`", "it does not sync the folder", "*fsync(2)*",
                 "| a killed process (SIGKILL, OOM killer) |",
                 "| a crashed node (kernel panic, hardware fault) |", "| a lost power supply |"):
        assert said in text, said


def test_the_solution_syncs_every_file_and_folder_before_its_commit_and_the_folder_after():
    solution = json.loads((EXCERPTS / "09_on_the_cluster.ipynb").read_text())["cells"]
    save = next("".join(c["source"]) for c in solution
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "save_checkpoint")
    steps = ("torch.save(state, file)", "os.fsync(file.fileno())", "sync_folder(folder)  ",
             "sync_folder(path)", "os.replace(", "sync_folder(folder)                            # the",
             "shutil.rmtree(")
    order = [save.index(said) for said in steps]
    assert order == sorted(order), order


SLURM_PAGES = ("slurm.schedmd.com/sbatch.html", "slurm.schedmd.com/scancel.html",
               "slurm.schedmd.com/preempt.html", "slurm.schedmd.com/slurm.conf.html")


def test_the_table_of_slurms_signals_has_its_three_events_and_cites_slurms_pages():
    text = " ".join(markdown().split())
    rows = [line for line in markdown().splitlines() if line.startswith("| ")]
    events = {row.split("|")[1].strip(): row for row in rows}
    time_limit, cancel, preemption = (events[key] for key in (
        "time limit, with `--signal=B:USR1@120`", "`scancel <job>`", "preemption, `PreemptMode=REQUEUE`"))
    assert "SIGUSR1 to the batch shell only" in time_limit and "`KillWait`" in time_limit
    assert "SIGCONT then SIGTERM" in cancel and "`KillWait`" in cancel
    assert "SIGCONT and SIGTERM at once" in preemption and "`GraceTime`" in preemption
    assert "preempt_send_user_signal" in preemption and "yes, by Slurm" in preemption
    assert "`PreemptParameters=send_user_signal`" in preemption            # its current name, then the old
    assert "manpages/lunar/en/man5/slurm.conf.5.html" in text               # 22.05's own spelling, cited
    assert all(page in text for page in SLURM_PAGES)


def test_the_stagers_are_placed_in_the_files_the_installed_torch_defines_them_in():
    import torch.distributed.checkpoint as dcp

    folder = Path(dcp.__file__).parent
    assert "class DefaultStager" in (folder / "staging.py").read_text()
    assert "class StateDictStager" in (folder / "_state_dict_stager.py").read_text()
    assert "the second in `_state_dict_stager.py`" in " ".join(markdown().split())


def test_youngs_interval_counts_only_the_419_unexpected_interruptions():
    """Llama 3 section 3.3.4: 466 interruptions in 54 days, 47 of them planned; the worked answer's mean
    time between interruptions is 3.09 h, not the 2.78 h of all 466 (the 12-07 review)."""
    cells = json.loads(CHAPTER.read_text())["cells"]
    [answer] = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith("%%worked_answer")
                and "mean_between" in "".join(c["source"])]
    namespace = {"math": math}
    exec(answer.split("\n", 1)[1].replace("print(", "said = ("), namespace)
    assert namespace["mean_between"] / 3600 == pytest.approx(54 * 24 / 419) == pytest.approx(3.09, abs=0.01)
    assert "47 of them planned" in " ".join(markdown().split()) and "419 unexpected" in markdown()
    assert "That is the end of the course" not in markdown() and "Next, chapter 10" in markdown()


@pytest.mark.parametrize("said", [
    "Once a job has been selected for preemption, its end time is set to the current time plus GraceTime",
    "The job's tasks are immediately sent SIGCONT and SIGTERM signals",
    "This second set of signals is sent to both the tasks and the containing batch script",
    "Send the user signal (e.g. --signal=<sig_num>) at preemption time even if the signal time hasn't been "
    "reached",
    "upon reaching its time limit. If the job fails to terminate gracefully in the interval specified, it "
    "will be forcibly terminated. The default value is 30 seconds.",
    "Preempts jobs by requeuing them (if possible) or canceling them. For jobs to be requeued they must have "
    "the --requeue sbatch option set",
])
def test_what_the_table_says_of_preemption_is_in_slurm_confs_manual_page(said):
    import gzip

    manual = Path("/usr/share/man/man5/slurm.conf.5.gz")
    if not manual.exists():
        pytest.skip("no slurm.conf manual page here (Slurm's packages are not installed)")
    page = re.sub(r"\\f[BIRP]", "", gzip.decompress(manual.read_bytes()).decode(errors="replace"))
    page = " ".join(line for line in page.replace("\\-", "-").splitlines() if not line.startswith("."))
    assert said in " ".join(page.split())


def test_the_local_slurm_preempts_for_real_with_a_short_grace_and_the_script_traps_term_and_usr1():
    start = (SLURM / "local" / "start.sh").read_text()
    grace = int(re.search(r'GRACE_TIME_S="\$\{COURSE_SLURM_GRACE_TIME_S:-(\d+)\}"', start).group(1))
    assert 10 <= grace <= 20 and "PreemptType=preempt/partition_prio" in start
    default = next(line for line in start.splitlines() if line.startswith("PartitionName=$PARTITION "))
    urgent = next(line for line in start.splitlines() if line.startswith("PartitionName=$URGENT_PARTITION "))
    tier = {name: int(re.search(r"PriorityTier=(\d+)", line).group(1)) for name, line in
            (("default", default), ("urgent", urgent))}
    assert tier["urgent"] > tier["default"] and "PreemptMode=REQUEUE GraceTime=$GRACE_TIME_S" in default
    assert f"a `GraceTime` of {grace} s" in " ".join(markdown().split())
    script = (SLURM / "preemptible.sbatch").read_text()
    assert "trap course_on_term TERM" in script and "trap course_on_warning USR1" in script
    assert "#SBATCH --requeue" in script and "PreemptTime" in script


def test_the_sigterm_design_is_described_only_after_the_exercise_that_asks_for_it():
    chapter = cells()
    graded = [i for i, c in enumerate(chapter) if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    design = [i for i, c in enumerate(chapter) if c["cell_type"] == "markdown"
              and "all-reduce" in "".join(c["source"]) and "same step" in "".join(c["source"])]
    assert design and min(design) > max(graded), (design, max(graded))


def test_the_channel_excerpt_is_attributed_to_its_issue_and_the_oob_part_of_a_long_line_is_shown():
    from course_lib.real.record.nccl_log import read_excerpts

    channels = read_excerpts(EXCERPTS / "nccl_debug_info.log")[1]
    assert channels.source == "https://github.com/NVIDIA/nccl/issues/634"
    assert any("4[31000]" in line for line in channels.lines)
    text = " ".join(markdown().split())
    assert "(NVIDIA/nccl issue #634: another user's log, not the 2.4.8 one)" in text
    code = "\n".join("".join(c["source"]) for c in cells() if c["cell_type"] == "code")
    assert 'f"{line[:100]} ... {line[-55:]}"' in code
    ib = next(line for e in read_excerpts(EXCERPTS / "nccl_current_info.log") for line in e.lines
              if "NET/IB : Using" in line)
    assert len(ib) >= 160 and "OOB eth0" in ib[-55:]
