"""`nbgrader collect` (the course's TrustedCollect) takes from the exchange only what each student owns.

The inbound folder is the students': whatever is in it, a student put there, and collect runs as root. A
student's links to a root-only file, `/proc/self/environ` or `/dev/zero`, a fifo, a file planted by someone
else, an entry made in a classmate's name: all refused and reported, the classmate's own submission
collected. The copy's rules are checked directly (fast, any user); the whole collect as root, with the
students real accounts (`nobody` the victim, `daemon` the attacker).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.grading.autograder.exchange_copy import CopyLimits, copy_owned_files
from course_lib.grading.sandbox.policy import running_as_root
from tests.support.site_install import shared_folder

REPO = Path(__file__).resolve().parents[1]
COURSE_ID = "distributed-training"
SECRET = "ROOT-ONLY-SECRET-4711"


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_the_copy_takes_regular_files_only_and_refuses_links_fifos_and_what_is_over_the_limits(tmp_path):
    src, secret = tmp_path / "entry", tmp_path / "secret.txt"
    secret.write_text(SECRET)
    (src / "sub").mkdir(parents=True)
    (src / "probe.ipynb").write_text("{}")
    (src / "sub" / "notes.txt").write_text("mine")
    (src / "secret.txt").symlink_to(secret)
    (src / "environ").symlink_to("/proc/self/environ")
    (src / "zero.ipynb").symlink_to("/dev/zero")
    (src / "folder_link").symlink_to(tmp_path)
    os.mkfifo(src / "pipe")
    (src / "big.bin").write_bytes(b"x" * 2000)
    (src / ".ipynb_checkpoints").mkdir()
    limits = CopyLimits(max_file_bytes=1000, excluded=(".*",))
    result = copy_owned_files(str(src), str(tmp_path / "out"), os.getuid(), limits)
    assert _tree(tmp_path / "out") == {"probe.ipynb", "sub", "sub/notes.txt"}
    refused = "\n".join(result.refused)
    for expected in ("'secret.txt': a symbolic link to", "'environ': a symbolic link to '/proc/self/environ'",
                     "'zero.ipynb': a symbolic link to '/dev/zero'", "'folder_link': a symbolic link",
                     "'pipe': a fifo", "'big.bin': 2000 bytes, over the 1000"):
        assert expected in refused, refused
    assert len(result.refused) == 6 and result.files == 3


def test_the_copy_stops_at_its_file_count_and_total_size(tmp_path):
    src = tmp_path / "entry"
    src.mkdir()
    for index in range(30):
        (src / f"f{index:02}.txt").write_bytes(b"y" * 100)
    counted = copy_owned_files(str(src), str(tmp_path / "a"), os.getuid(), CopyLimits(max_files=10))
    assert counted.files == 10 and "more than 10 files" in counted.refused[0] and len(counted.refused) == 1
    sized = copy_owned_files(str(src), str(tmp_path / "b"), os.getuid(), CopyLimits(max_bytes=550))
    assert sized.files == 5 and sized.bytes == 500 and len(sized.refused) == 25
    assert "would exceed 550 bytes" in sized.refused[0]


def test_the_copy_refuses_a_folder_of_another_uid(tmp_path):
    with pytest.raises(PermissionError, match="not uid"):
        copy_owned_files(str(tmp_path), str(tmp_path / "out"), os.getuid() + 1, CopyLimits())
    assert not (tmp_path / "out").exists()


def _as(user: str, script: str, *args: str) -> None:
    """``sh -c script`` as ``user``: what that student can do to the exchange with its own rights."""
    entry = pwd.getpwnam(user)
    subprocess.run(["sh", "-c", script, "sh", *args], user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                   cwd="/", check=True, timeout=60)


@pytest.mark.slow   # a real `nbgrader collect` (and the gradebook it makes): seconds
def test_collect_as_root_refuses_links_planted_files_and_entries_in_another_students_name(tmp_path):
    if not (running_as_root() and shutil.which("sh")):
        pytest.skip("only as root does collect read other accounts' entries (and the attack matter)")
    for user in ("nobody", "daemon"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            pytest.skip(f"needs the system account {user!r} as a student")
    course, area = tmp_path / "course", shared_folder("course-collect-")
    try:
        (course / "grading").mkdir(parents=True, mode=0o700)
        shutil.copy(REPO / "nbgrader_config.py", course)
        secret = tmp_path / "root-only" / "secret.txt"   # tmp_path is root's alone
        secret.parent.mkdir()
        secret.write_text(SECRET)
        inbound = area / COURSE_ID / "inbound"
        inbound.mkdir(parents=True)
        inbound.chmod(0o733)   # as nbgrader release_assignment makes it: anyone may add, nobody may list
        victim = inbound / "nobody+probe+2026-12-07 09:00:00 UTC+a1"
        forged = inbound / "nobody+probe+2026-12-07 10:00:00 UTC+b2"
        attacker = inbound / "daemon+probe+2026-12-07 09:30:00 UTC+c3"
        _as("nobody", 'mkdir "$1" && echo VICTIM > "$1/probe.ipynb"', str(victim))
        # later than the victim's: nbgrader's collect took this one, and the victim scored 0
        _as("daemon", 'mkdir "$1" && echo FORGED > "$1/probe.ipynb"', str(forged))
        _as("daemon", 'ln -s "$2" "$1"', str(inbound / "nobody+probe+2026-12-07 11:00:00 UTC+d4"),
            str(victim))
        _as("daemon", 'mkdir "$1" && echo X > "$1/probe.ipynb"',
            str(inbound / "no-such-student+probe+2026-12-07 09:00:00 UTC+e5"))
        _as("daemon", 'mkdir "$1" && cd "$1" && echo ATTACKER > probe.ipynb && ln -s "$2" secret.txt && '
                      'ln -s /proc/self/environ environ && ln -s /dev/zero zero.ipynb && mkfifo pipe',
            str(attacker), str(secret))
        (attacker / "planted.txt").write_text(SECRET)   # another account's file in the student's folder
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        run = subprocess.run([sys.executable, "-m", "nbgrader", "collect", "probe", f"--Exchange.root={area}",
                              f"--CourseDirectory.course_id={COURSE_ID}"], cwd=course, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(area, ignore_errors=True)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    submitted = course / "grading" / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == ["daemon", "nobody"], log[-3000:]
    assert (submitted / "nobody" / "probe" / "probe.ipynb").read_text() == "VICTIM\n"   # the victim's own
    assert _tree(submitted / "daemon" / "probe") == {"probe.ipynb", "timestamp.txt"}
    for path in submitted.rglob("*"):
        assert path.is_dir() or SECRET.encode() not in path.read_bytes(), path
    refusals = [line for line in log.splitlines() if "REFUSED" in line]
    expected = ["'nobody+probe+2026-12-07 10:00:00 UTC+b2': it names student 'nobody' but belongs to daemon "
                "(uid 1)", "'nobody+probe+2026-12-07 11:00:00 UTC+d4': it is not a folder (owned by daemon",
                "'no-such-student+probe+2026-12-07 09:00:00 UTC+e5': it names student 'no-such-student', who "
                "has no account", "of student 'daemon': 'environ': a symbolic link to '/proc/self/environ'",
                "'zero.ipynb': a symbolic link to '/dev/zero'", "'secret.txt': a symbolic link to",
                "'pipe': a fifo", "'planted.txt': belongs to root (uid 0), not to the submitting student"]
    for text in expected:
        assert any(text in line for line in refusals), (text, refusals)
    assert len(refusals) == 8, refusals
