"""A class on the course's JupyterHub, in a real browser: the hub (`make hub-up`), its proxy, formgrader
and the local Slurm are real, and so are the accounts (PAM logins with Unix passwords).

The instructor releases chapter 02 from formgrader. A student logs in, gets a server as a Slurm job,
fetches the chapter from the Assignments tab, runs real ranks in it and writes the ring. Slurm cancels
the job: the hub says so and the student starts again with nothing lost, then submits. The hub is
restarted mid-class and keeps the submission and the student's server. The instructor collects in
formgrader, grades with `make grade`'s pipeline and releases feedback, which the student fetches and
reads with their score. A second student can read neither the submission nor the instructor's source,
checked on the file system as that account.
"""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from tests.hub.hub_driver import COURSE_ID, ClassAccounts, CourseHub, as_account, run
from tests.test_browser import ARTIFACTS, launch_chromium

# The class takes a few minutes on an idle 2-core machine, most of it `make grade` on chapter 02 (the
# reference solution, then the submission); the timeout only guards against a hang on a busy one.
pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.browser, pytest.mark.hub,
              pytest.mark.timeout(900)]
CHAPTER = "02_collectives"
REPO = Path(__file__).resolve().parents[2]
ANSWERED = ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce")   # predict_gloo_all_reduce is left
ALL_REDUCE_OUTPUT = "[60.0, 64.0, 68.0, 72.0]"   # four ranks' arange(4) + 10 * rank, summed
SLOW_UI_MS = 120_000


class Steps:
    """How long each step took, printed at the end (the test's budget is under 5 minutes in CI)."""

    def __init__(self):
        self.start = self.last = time.monotonic()
        self.laps: list[str] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.laps.append(f"{now - self.last:6.1f} s  {step}")
        print(self.laps[-1], flush=True)
        self.last = now

    def report(self) -> str:
        return f"{time.monotonic() - self.start:6.1f} s  in all"


def release_cells() -> tuple[dict[str, int], dict[str, str], int, int]:
    """Where each answer cell is in the release, the reference answers, and the points the answers
    earn out of the chapter's total."""
    release = nbformat.read(REPO / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    source = nbformat.read(REPO / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", 4)
    index = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(release.cells)}
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in source.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    earned = sum(p for test, p in points.items() if "predict_gloo" not in test)
    return index, answers, earned, sum(points.values())


def log_in(page, hub: CourseHub, user: str, password: str, next_url: str = "") -> None:
    page.goto(f"{hub.url}/hub/login" + (f"?next={next_url}" if next_url else ""))
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")


def wait_for_lab(page, hub: CourseHub, user: str) -> None:
    page.wait_for_url(re.compile(rf"^{re.escape(hub.url)}/user/{user}/lab"), timeout=SLOW_UI_MS)
    page.wait_for_selector(".lm-MenuBar", timeout=SLOW_UI_MS)


def formgrader_button(page, hub: CourseHub, column: str, success: str) -> None:
    """Click formgrader's button in chapter 02's row and wait for its success dialog."""
    from playwright.sync_api import expect

    page.goto(f"{hub.url}/services/{COURSE_ID}/formgrader/manage_assignments")
    row = page.locator("tr", has=page.locator("td.name", has_text=CHAPTER))
    expect(row).to_have_count(1, timeout=SLOW_UI_MS)
    row.locator(f"td.{column} a").click()
    dialog = page.locator(".modal.in, .modal.show")
    expect(dialog).to_contain_text(re.compile("Success|error", re.I), timeout=SLOW_UI_MS)
    assert success in dialog.inner_text(), dialog.inner_text()[-3000:]
    dialog.get_by_role("button", name="OK").click()


def open_assignments(page):
    """The Assignments tab (nbgrader's Assignment List), freshly loaded."""
    from playwright.sync_api import expect

    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    page.locator("#refresh_assignments_list").click()
    expect(page.locator("#course_list_default")).to_have_text(COURSE_ID, timeout=SLOW_UI_MS)


def wait_for_idle_kernel(page, seconds: float = 120) -> None:
    """Until the status bar says the notebook's kernel (the course's) is idle, accepting the kernel dialog
    a busy server may show: cells run before the kernel is up are dropped, not queued."""
    status = page.get_by_role("button", name=re.compile(r"Python 3 \(distributed course\) \| Idle"))
    deadline = time.monotonic() + seconds
    while not status.count():
        assert time.monotonic() < deadline, f"the notebook's kernel was not idle within {seconds} s"
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        time.sleep(0.5)


def go_to_cell(page, target: int) -> None:
    """Make cell ``target`` the active one, in command mode, as the keyboard does (k up, j down): the
    notebook renders only the cells near the view, so they are reached by moving, not looked up."""
    active = page.locator(".jp-Notebook .jp-Cell.jp-mod-active")
    page.keyboard.press("Escape")
    moves = target - int(active.get_attribute("data-windowed-list-index"))
    for _ in range(abs(moves)):
        page.keyboard.press("j" if moves > 0 else "k")
    assert int(active.get_attribute("data-windowed-list-index")) == target


def write_answers(page, index: dict[str, int], answers: dict[str, str]) -> None:
    """Move to each answer cell and type the answer into it, then save."""
    from playwright.sync_api import expect

    for grade_id in ANSWERED:
        go_to_cell(page, index[grade_id])
        expect(page.locator(".jp-Notebook .jp-Cell.jp-mod-active")).to_contain_text(f"def {grade_id}",
                                                                                    timeout=10_000)
        page.keyboard.press("Enter")
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(answers[grade_id])
        page.keyboard.press("Escape")
    page.keyboard.press("Control+s")


def kernel_job(user: str) -> str:
    """The SLURM_JOB_ID in the environment of the user's notebook kernel (read from /proc)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.stat().st_uid != pwd_uid(user) or b"ipykernel" not in (proc / "cmdline").read_bytes():
                continue
            pairs = (proc / "environ").read_bytes().split(b"\0")
            environ = dict(pair.split(b"=", 1) for pair in pairs if b"=" in pair)
        except OSError:
            continue
        return environ.get(b"SLURM_JOB_ID", b"").decode()
    return ""


def pwd_uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


def answers_saved(notebook: Path, index: dict[str, int], answers: dict[str, str]) -> bool:
    try:
        cells = nbformat.read(notebook, 4).cells
    except (OSError, ValueError):
        return False
    return all(cells[index[grade_id]].source == answers[grade_id] for grade_id in ANSWERED)


SECOND_STUDENT_PROBE = """
import json, os, sys
result = {}
for what, (kind, path) in json.loads(sys.argv[1]).items():
    try:
        os.listdir(path) if kind == "list" else open(path, "rb").read(1)
        result[what] = "allowed"
    except PermissionError:
        result[what] = "denied"
    except OSError as error:
        result[what] = f"{type(error).__name__}: {error}"
print(json.dumps(result))
"""


def second_student_sees(hub: CourseHub, student: str, probes: dict[str, tuple[str, Path]]) -> dict[str, str]:
    """For each probe (list a folder / read a file), what the account ``student`` gets: allowed, denied."""
    listed = json.dumps({what: [kind, str(path)] for what, (kind, path) in probes.items()})
    code = SECOND_STUDENT_PROBE.replace("sys.argv[1]", repr(listed))
    answer = as_account(student, hub.course / ".venv" / "bin" / "python", code)
    assert answer.returncode == 0, answer.stderr[-2000:]
    return json.loads(answer.stdout)


@dataclass
class Class:
    """Everything the steps share: the hub, the accounts, the two browser pages, the chapter's cells."""

    hub: CourseHub
    accounts: ClassAccounts
    teacher: object          # the instructor's page (playwright Page)
    student: object          # the first student's page
    steps: Steps
    index: dict[str, int] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)
    earned: int = 0
    total: int = 0
    job: str = ""

    @property
    def ada(self) -> str:
        return self.accounts.students[0]

    @property
    def notebook(self) -> Path:
        return self.accounts.home(self.ada) / COURSE_ID / CHAPTER / f"{CHAPTER}.ipynb"

    def saved(self) -> bool:
        return answers_saved(self.notebook, self.index, self.answers)


def instructor_releases(c: Class) -> None:
    """The instructor logs in straight to formgrader (no server of her own) and releases chapter 02."""
    ines = c.accounts.instructors[0]
    log_in(c.teacher, c.hub, ines, c.accounts.passwords[ines], f"/services/{COURSE_ID}/formgrader/")
    formgrader_button(c.teacher, c.hub, "release", f"Successfully released '{CHAPTER}'")
    assert (c.hub.exchange / "outbound" / CHAPTER / f"{CHAPTER}.ipynb").is_file()
    c.steps.done("instructor logged in and released chapter 02 from formgrader")


def student_logs_in(c: Class) -> None:
    """The hub starts the student's JupyterLab as a Slurm job, submitted as the student."""
    log_in(c.student, c.hub, c.ada, c.accounts.passwords[c.ada])
    wait_for_lab(c.student, c.hub, c.ada)
    c.job = c.hub.server_job(c.ada)
    squeue = run("squeue", "--noheader", "--jobs", c.job, "--format=%u %T", env=c.hub.env).stdout.split()
    assert squeue == [c.ada, "RUNNING"], squeue
    c.steps.done(f"student logged in; their server is Slurm job {c.job}")


def student_works(c: Class) -> None:
    """Assignments tab: fetch and open chapter 02, run its cells up to real ranks, write the ring, save."""
    from playwright.sync_api import expect

    page = c.student
    open_assignments(page)
    page.locator("#released_assignments_list .list_item", has_text=CHAPTER).get_by_role(
        "button", name="fetch").click()
    fetched = page.locator("#fetched_assignments_list .list_item", has_text=CHAPTER).first
    fetched.locator("a.assignment-notebooks-link").click()
    page.locator("#fetched_assignments_list .assignment-notebooks a", has_text=CHAPTER).first.click()
    page.locator(".jp-Notebook .jp-Cell").first.click()
    wait_for_idle_kernel(page)
    go_to_cell(page, 0)
    demo = next(i for i, cell in enumerate(nbformat.read(REPO / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb",
                                                         4).cells) if "all_reduce_demo, WORLD" in cell.source)
    for _ in range(demo + 1):   # the imports through the all-reduce demo, which starts 4 real ranks
        page.keyboard.press("Shift+Enter")
    ranks = page.locator(".jp-OutputArea-output", has_text="all_reduce").first
    expect(ranks).to_contain_text(ALL_REDUCE_OUTPUT, timeout=SLOW_UI_MS)
    assert kernel_job(c.ada) == c.job, "the notebook's kernel (and its ranks) ran outside the student's job"
    write_answers(page, c.index, c.answers)
    c.hub.wait_for(c.saved, "the answers saved", 30)
    c.steps.done("fetched, opened, ran 4 ranks inside the job, wrote and saved the ring")


def slurm_cancels_the_job(c: Class) -> None:
    """The hub tells the student why their server is gone; they start again and lose nothing."""
    from playwright.sync_api import expect

    run("scancel", c.job, env=c.hub.env, check=True)
    c.hub.wait_for(lambda: c.hub.server_job(c.ada) is None, "the hub noticing the cancelled job", 60)
    c.student.goto(f"{c.hub.url}/hub/home")
    ended = c.student.locator("#course-server-ended")
    expect(ended).to_contain_text(f"Slurm job {c.job}", timeout=30_000)
    assert "cancelled" in ended.inner_text() and "files are kept" in ended.inner_text(), ended.inner_text()
    c.student.locator("#start").click()
    wait_for_lab(c.student, c.hub, c.ada)
    cancelled, c.job = c.job, c.hub.server_job(c.ada)
    assert c.job and c.job != cancelled and c.saved()
    c.steps.done(f"job {cancelled} cancelled: told why, started job {c.job}, answers intact")


def student_submits(c: Class) -> list[str]:
    from playwright.sync_api import expect

    open_assignments(c.student)
    c.student.locator("#fetched_assignments_list .list_item", has_text=CHAPTER).first.get_by_role(
        "button", name="Submit").click()
    expect(c.student.locator("#submitted_assignments_list .list_item", has_text=CHAPTER).first).to_be_visible(
        timeout=SLOW_UI_MS)
    submitted = [p.name for p in (c.hub.exchange / "inbound").iterdir()]
    # student+assignment+time+72 random bits: what keeps another student from naming it (no listing).
    named = rf"{c.ada}\+{CHAPTER}\+[^+]+\+[\w-]{{12}}"
    assert len(submitted) == 1 and re.fullmatch(named, submitted[0]), submitted
    c.steps.done("submitted from the Assignments tab")
    return submitted


def hub_restarts(c: Class, submitted: list[str]) -> None:
    """stop.sh --keep-servers and make hub-up: the submission and the student's server are kept."""
    c.hub.down("--keep-servers")
    print(c.hub.up())
    assert c.hub.server_job(c.ada) == c.job, "the restarted hub lost the student's running server"
    assert [p.name for p in (c.hub.exchange / "inbound").iterdir()] == submitted
    # While the hub was down JupyterLab may have said the server was not running; a reload finds it.
    c.student.goto(f"{c.hub.url}/user/{c.ada}/lab")
    wait_for_lab(c.student, c.hub, c.ada)
    c.steps.done("hub restarted: the submission and the running server kept")


def instructor_grades(c: Class) -> None:
    """Collect (formgrader), grade (make grade's pipeline, as root), release the feedback (formgrader)."""
    formgrader_button(c.teacher, c.hub, "collect", f"Successfully collected submissions of '{CHAPTER}'")
    # `make grade`'s command, in the course's folder (whose course_lib it imports, so the class graded is
    # that course's). Grading is root's, and root runs it on this run's own interpreter: the one the
    # site copy's students use (site_install.py) may be the system's older patch release, on which
    # nbconvert's HTML export (the feedback) fails (Debian 12's 3.11.2 with soupsieve 4.1).
    grade = ["-m", "course_lib.grading.cli", "grade", "--assignment", CHAPTER, "--jobs", "1"]
    grading = run(sys.executable, *grade, cwd=c.hub.course, env=c.hub.env, timeout=420)
    assert grading.returncode == 0, grading.stdout[-3000:] + grading.stderr[-3000:]
    with open(c.hub.course / "grading" / "grades.csv", newline="") as handle:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}
    assert scores == {c.ada: c.earned}, scores
    formgrader_button(c.teacher, c.hub, "release-feedback", f"Successfully released feedback of '{CHAPTER}'")
    c.steps.done(f"collected, graded ({c.earned}/{c.total}) and released the feedback")


def student_reads_feedback(c: Class) -> None:
    from playwright.sync_api import expect

    open_assignments(c.student)
    c.student.locator("#submitted_assignments_list .list_item", has_text=CHAPTER).first.get_by_role(
        "button", name="Fetch Feedback").click()
    c.student.get_by_text("(view feedback)").first.click()
    c.student.locator(".jp-DirListing-item", has_text=f"{CHAPTER}.html").dblclick()
    score = f"Score: {c.earned:.1f} / {c.total:.1f}"
    expect(c.student.frame_locator(".jp-HTMLViewer iframe").locator("body")).to_contain_text(
        score, timeout=SLOW_UI_MS)
    c.steps.done(f"student fetched the feedback and read '{score}'")


def second_student_is_kept_out(c: Class) -> None:
    """formgrader refuses a student; on the file system the second student reaches the release, never
    another's submission or work, the grading or the instructor's source."""
    assert c.student.request.get(f"{c.hub.url}/services/{COURSE_ID}/formgrader").status == 403
    course, exchange = c.hub.course, c.hub.exchange
    seen = second_student_sees(c.hub, c.accounts.students[1], {
        "the release (they may)": ("read", course / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb"),
        "the chapter in the exchange (they may)": ("list", exchange / "outbound" / CHAPTER),
        "the submissions in the exchange": ("list", exchange / "inbound"),
        "the feedback in the exchange": ("list", exchange / "feedback"),
        "the first student's home": ("list", c.accounts.home(c.ada)),
        "the first student's notebook": ("read", c.notebook),
        "the collected submission": ("list", course / "grading" / "submitted" / c.ada / CHAPTER),
        "the gradebook": ("read", course / "grading" / "gradebook.db"),
        "the instructor's source": ("read", course / "solutions" / CHAPTER / f"{CHAPTER}.ipynb"),
        "the wrong answers the grader is tested with": ("list", course / "autograde_tests" / "fixtures"),
    })
    assert seen == {what: "allowed" if "(they may)" in what else "denied" for what in seen}, seen
    c.steps.done("second student: submissions, work, grading and source closed; formgrader says 403")


def test_a_class_on_the_hub(site_hub, class_accounts):
    from playwright.sync_api import sync_playwright

    steps = Steps()
    print(site_hub.up())
    steps.done("make hub-up: hub, proxy and formgrader started")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        pages = [browser.new_context(viewport={"width": 1400, "height": 1000}).new_page() for _ in range(2)]
        c = Class(site_hub, class_accounts, *pages, steps)
        c.index, c.answers, c.earned, c.total = release_cells()
        try:
            instructor_releases(c)
            student_logs_in(c)
            student_works(c)
            slurm_cancels_the_job(c)
            hub_restarts(c, student_submits(c))
            instructor_grades(c)
            student_reads_feedback(c)
            second_student_is_kept_out(c)
        finally:
            for name, page in (("hub-instructor", c.teacher), ("hub-student", c.student)):
                page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
            browser.close()
    print(site_hub.down())
    leftover = run("squeue", "--noheader", "--user", c.ada, env=site_hub.env).stdout.strip()
    assert not leftover, f"a server job outlived make hub-down: {leftover}"
    steps.done("make hub-down: servers, hub and proxy stopped")
    print(steps.report())
