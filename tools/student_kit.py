"""`make student-kit`: what a student gets (released notebooks, course_lib, tests, a Makefile) and no answer.

The kit holds every chapter found in notebooks/, course_lib with the student's side of course_lib.grading
(checks/ and attempt/, by folder, and what they import), the course_lib unit tests that need nothing
instructor-only, and a scan proves no solution code, hidden check or autograde_tests/ content came along.
Writes build/student-kit/ and build/student-kit.zip (and with --git, a fresh repository in the kit folder).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT_FILES = ROOT / "tools" / "kit"              # the student Makefile, README and .gitignore
ROOT_FILES = ("pyproject.toml", "environment.yml", "conftest.py")
SHIPPED_TOOLS = ("tools/check_notebooks.py", "tools/torch_index.py")
TEST_FOLDERS = ("tests/sim", "tests/real", "tests/viz", "tests/examples", "tests/chapters")
# A test naming any of these needs what a student lacks (a path built as ROOT / "solutions" / ... too;
# instructor_checks( loads the hidden checks, which the kit leaves out).
INSTRUCTOR_WORDS = ("autograde_tests", "instructor/", "solutions/", '"solutions"', '"instructor"',
                    "BEGIN SOLUTION", "HIDDEN TESTS", "instructor_checks(")
INSTRUCTOR_FOLDERS = ("solutions", "instructor", "autograde_tests", "grading")
STUDENT_GRADING = ("checks", "attempt")   # the folders of course_lib.grading a student's notebooks run
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
MIN_LEAK_LINE = 24  # shorter lines (`return x`, `import torch`) are too common to prove a leak


def chapters() -> list[str]:
    """Every chapter released in notebooks/ (folders holding a notebook), whenever it was added."""
    return sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def _imported_modules(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.startswith("course_lib")}


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n".join(line for text in lines for line in text.splitlines()
                     if not line.lstrip().startswith(("%", "!")))  # magics are not Python


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def needed_grading_modules() -> set[Path]:
    """The files of course_lib.grading a student needs: checks/ and attempt/ whole, and what they, the
    notebooks and the rest of course_lib import from grading (transitively)."""
    grading = ROOT / "course_lib" / "grading"
    files = {grading / "__init__.py"}
    files |= {p for folder in STUDENT_GRADING for p in (grading / folder).rglob("*.py")}
    sources = [_notebook_code(p) for chapter in chapters()
               for p in (ROOT / "notebooks" / chapter).glob("*.ipynb")]
    sources += [p.read_text() for p in (ROOT / "course_lib").rglob("*.py")
                if "grading" not in p.parts or p in files]
    pending = set().union(*(_imported_modules(s) for s in sources))
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is not None and "grading" in path.relative_to(ROOT).parts:
            files.add(path)
            pending |= _imported_modules(path.read_text())
    return files


def _copy_course_lib(kit: Path) -> None:
    grading = ROOT / "course_lib" / "grading"
    keep = needed_grading_modules()

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
        here = Path(folder)
        if here == grading or grading in here.parents:
            skipped |= {n for n in names if n.endswith(".py") and here / n not in keep}
            skipped |= {n for n in names if (here / n).is_dir() and not any(
                p.is_relative_to(here / n) for p in keep)}
        return skipped

    shutil.copytree(ROOT / "course_lib", kit / "course_lib", ignore=ignore)


def _student_tests() -> list[Path]:
    """course_lib's unit tests (and their helpers) that mention nothing a student does not have."""
    files = [ROOT / "tests" / "__init__.py", *sorted((ROOT / "tests" / "support").glob("*.py"))]
    for folder in TEST_FOLDERS:
        files += sorted((ROOT / folder).rglob("*.py"))
    return [p for p in files if p.is_file() and not any(w in p.read_text() for w in INSTRUCTOR_WORDS)
            and "__pycache__" not in p.parts]


def _pyproject_for_students() -> str:
    """pyproject.toml without the instructor's folders in its test and lint paths."""
    text = (ROOT / "pyproject.toml").read_text()
    text = re.sub(r'^testpaths = .*$', 'testpaths = ["tests"]', text, flags=re.MULTILINE)
    text = re.sub(r'"(?:autograde_tests|instructor|solutions)/[^"]*",?[ \t]*', "", text)
    return re.sub(r"^[\w-]+ = \[\]\n", "", text, flags=re.MULTILINE)


def build(kit: Path) -> Path:
    """Write the kit folder (replacing it); returns it."""
    if kit.exists():
        shutil.rmtree(kit)
    kit.mkdir(parents=True)
    for chapter in chapters():
        shutil.copytree(ROOT / "notebooks" / chapter, kit / "notebooks" / chapter,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    _copy_course_lib(kit)
    for path in _student_tests() + [ROOT / name for name in ROOT_FILES + SHIPPED_TOOLS]:
        target = kit / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    (kit / "pyproject.toml").write_text(_pyproject_for_students())
    for template in KIT_FILES.iterdir():
        shutil.copy2(template, kit / template.name)
    return kit


def _lines(path: Path) -> set[str]:
    """A file's stripped lines; a notebook's are its cells' (sources and any stored outputs)."""
    text = path.read_text(errors="ignore")
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text)["cells"]
        except (ValueError, KeyError):
            return {line.strip() for line in text.splitlines()}
        text = "\n".join("".join(c.get("source", "")) + "".join(
            "".join(o.get("text", "")) for o in c.get("outputs", [])) for c in cells)
    return {line.strip() for line in text.splitlines()}


def secret_lines() -> dict[str, str]:
    """line -> where it comes from: solution code, hidden checks and autograde_tests/ lines that nothing
    shipped shows."""
    public = [*(ROOT / "notebooks").rglob("*.ipynb"), *(ROOT / "course_lib").rglob("*.py"), *_student_tests(),
              *(ROOT / name for name in SHIPPED_TOOLS)]
    shown = set().union(*(_lines(p) for p in public))
    secrets = {}
    for path in (ROOT / "solutions").rglob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            for block in re.findall(r"### BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", text, re.DOTALL):
                for line in block.splitlines():
                    secrets.setdefault(line.strip(), str(path.relative_to(ROOT)))
    for path in [*(ROOT / "autograde_tests").rglob("*.py"), *(ROOT / "instructor").rglob("*.py")]:
        for line in path.read_text().splitlines():
            secrets.setdefault(line.strip(), str(path.relative_to(ROOT)))
    return {line: where for line, where in secrets.items()
            if len(line) >= MIN_LEAK_LINE and line not in shown}


def scan(kit: Path) -> list[str]:
    """Every leak found in the kit: instructor folders, nbgrader markers, solution or hidden-check lines."""
    secrets = secret_lines()
    leaks = []
    for path in sorted(p for p in kit.rglob("*") if p.is_file() and ".git" not in p.relative_to(kit).parts):
        relative = path.relative_to(kit)
        if relative.parts[0] in INSTRUCTOR_FOLDERS:
            leaks.append(f"{relative}: an instructor-only folder")
            continue
        text = path.read_text(errors="ignore")
        leaks += [f"{relative}: holds the marker {m!r}" for m in MARKERS if m in text]
        leaks += [f"{relative}: holds a line of {secrets[line]}: {line[:80]}"
                  for line in sorted(_lines(path) & secrets.keys())]
    return leaks


def archive(kit: Path, with_git: bool) -> Path:
    if with_git:
        git = ["git", "-C", str(kit), "-c", "user.name=course", "-c", "user.email=course@localhost"]
        for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "The course, as handed out"]):
            subprocess.run(git + step, check=True, capture_output=True)
    return Path(shutil.make_archive(str(kit), "zip", kit.parent, kit.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--into", type=Path, default=ROOT / "build" / "student-kit", help="the kit folder")
    parser.add_argument("--git", action="store_true", help="also make the kit folder a fresh git repository")
    args = parser.parse_args(argv)
    kit = build(args.into.resolve())
    leaks = scan(kit)
    if leaks:
        shutil.rmtree(kit)
        raise SystemExit("the student kit would leak instructor material, so it was not written:\n  "
                         + "\n  ".join(leaks[:20]))
    zipped = archive(kit, args.git)
    print(f"student kit for {', '.join(chapters())}: {kit}/ and {zipped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
