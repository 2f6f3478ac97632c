"""The course's grading settings, read from its nbgrader_config.py: the course id, the per-cell timeout
(and an assignment's own, ``c.CourseGrading.cell_timeouts``), and where the instructor-only hidden
checks and their registry live (``c.CourseGrading``).

Course code never names those folders: a course says where they are, a grading run passes them on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import course_lib
from course_lib.real.plumbing.processes import fresh_python_output

CODE_ROOT = Path(course_lib.__file__).resolve().parent.parent   # the checkout course_lib is installed from
CONFIG_FILE = "nbgrader_config.py"
HIDDEN_CHECKS_ENV = "COURSE_HIDDEN_CHECKS"   # a grading run's hidden-check folders (os.pathsep-separated)


@functools.cache
def code_root_for_fresh_pythons() -> str | None:
    """CODE_ROOT, when a fresh interpreter of this environment would import course_lib from elsewhere, or
    None when it imports this very course_lib. They differ when `python -m course_lib.grading.cli` runs
    in a checkout (or a site copy) with an environment installed for another checkout: the grading
    processes it starts (nbgrader, the kernels) put this folder first on their path, so that student code
    runs against the course_lib this grader runs, in the folder the sandbox lets it reach."""
    probe = "import importlib.util as u; s = u.find_spec('course_lib'); print(s.origin if s else '')"
    found = fresh_python_output(probe)
    same = bool(found) and Path(found).resolve().parent.parent == CODE_ROOT
    return None if same else str(CODE_ROOT)


@dataclass(frozen=True)
class CourseSettings:
    """What a grading run honours from the course's config; paths are absolute. A setting the config does
    not give is None (or empty): ``GradingRun`` refuses a course without an id or a cell timeout."""

    course_id: str | None = None
    cell_timeout: int | None = None
    cell_timeouts: dict[str, int] = field(default_factory=dict)   # assignment -> its cells' own limit
    hidden_checks: tuple[Path, ...] = ()    # folders of hidden-check modules, searched in order
    registry: Path | None = None            # the module whose CHECKS the isolated judge re-runs
    hidden_from_students: tuple[Path, ...] = ()   # more than solutions/ and grading/: e.g. wrong answers
    demo_fixtures: dict[str, Path] = field(default_factory=dict)   # assignment -> a wrong answer's file
    lms_late_tag: str | None = None   # "_LATE": the LMS's late mark in a zip's name decides (zip_times)

    def cell_timeout_for(self, assignment: str) -> int:
        """Seconds one cell of ``assignment`` may run: its own limit where the course gives one."""
        return self.cell_timeouts.get(assignment, self.cell_timeout)

    def problems(self) -> list[str]:
        """What keeps these settings from grading a class, each with what to change (empty: none)."""
        problems = []
        if not self.course_id:
            problems.append("the course has no id: set c.CourseDirectory.course_id in its nbgrader_config.py")
        if not (isinstance(self.cell_timeout, int) and self.cell_timeout > 0):
            problems.append(f"cell_timeout must be a positive number of seconds "
                            f"(c.ExecutePreprocessor.timeout in nbgrader_config.py), got "
                            f"{self.cell_timeout!r}")
        bad = {name: s for name, s in self.cell_timeouts.items() if not (isinstance(s, int) and s > 0)}
        if bad:
            problems.append(f"cell_timeouts must map assignments to positive seconds, got {bad}")
        if self.registry is not None and not self.hidden_checks:
            problems.append(f"a registry ({self.registry}) without hidden_checks: the isolated judge could "
                            "not find the checks it names; give their folders "
                            "(c.CourseGrading.hidden_checks)")
        return problems

    def to_plain(self) -> dict:
        """These settings as JSON holds them (paths as strings); ``from_plain`` reads them back."""
        return {"course_id": self.course_id, "cell_timeout": self.cell_timeout,
                "cell_timeouts": dict(self.cell_timeouts),
                "hidden_checks": [str(p) for p in self.hidden_checks],
                "registry": str(self.registry) if self.registry else None,
                "hidden_from_students": [str(p) for p in self.hidden_from_students],
                "demo_fixtures": {name: str(path) for name, path in self.demo_fixtures.items()},
                "lms_late_tag": self.lms_late_tag}

    @classmethod
    def from_plain(cls, plain: dict) -> CourseSettings:
        return cls(course_id=plain["course_id"], cell_timeout=plain["cell_timeout"],
                   cell_timeouts=dict(plain["cell_timeouts"]),
                   hidden_checks=tuple(Path(p) for p in plain["hidden_checks"]),
                   registry=Path(plain["registry"]) if plain["registry"] else None,
                   hidden_from_students=tuple(Path(p) for p in plain["hidden_from_students"]),
                   demo_fixtures={name: Path(path) for name, path in plain["demo_fixtures"].items()},
                   lms_late_tag=plain.get("lms_late_tag"))


def read_settings(course_root: Path) -> CourseSettings:
    """The settings of the course at ``course_root``; empty when it has no nbgrader_config.py."""
    from traitlets.config.loader import PyFileConfigLoader

    course_root = Path(course_root).resolve()
    if not (course_root / CONFIG_FILE).exists():
        return CourseSettings()
    config = PyFileConfigLoader(CONFIG_FILE, path=str(course_root)).load_config()
    grading = config.CourseGrading
    registry = grading.get("registry")
    timeout = config.ExecutePreprocessor.get("timeout")
    return CourseSettings(
        course_id=config.CourseDirectory.get("course_id"),
        cell_timeout=int(timeout) if timeout is not None else None,
        cell_timeouts={name: int(seconds) for name, seconds in grading.get("cell_timeouts", {}).items()},
        hidden_checks=tuple(course_root / folder for folder in grading.get("hidden_checks", ())),
        registry=course_root / registry if registry else None,
        hidden_from_students=tuple(course_root / path for path in grading.get("hidden_from_students", ())),
        demo_fixtures={name: course_root / path for name, path in grading.get("demo_fixtures", {}).items()},
        lms_late_tag=grading.get("lms_late_tag") or None)
