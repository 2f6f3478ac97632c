"""The front door and the guides stay true: every relative link resolves (anchors too), every `make`
target they name exists, and README.md stays a page with its audience router on the first screen."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md",
               *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
MAKE_CALL = re.compile(r"(?:^|[\s;&|(`])make\s+((?:[A-Z_]+=\S*\s+)*)([a-z][a-z0-9-]*)", re.M)
EXERCISE_FOLDER = re.compile(r"ch\d\d_\w+")   # grading/checks/chNN_<exercise>/: README draws the pattern once


def makefile_targets() -> set[str]:
    """The course's targets and the student kit's (tools/kit/Makefile), which the guides also name."""
    text = (ROOT / "Makefile").read_text() + (ROOT / "tools" / "kit" / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*)\s*:(?!=)", text, re.M))


def heading_anchors(markdown: Path) -> set[str]:
    """GitHub's anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.*)$", markdown.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue                                   # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{doc.relative_to(ROOT)} links to: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_make_targets_exist(doc):
    code = "\n".join(CODE.findall(doc.read_text()))
    code = re.sub(r"apt-get install[^\n`]*", "", code)      # there `make` is a package, not a command
    named = {target for _, target in MAKE_CALL.findall(code)}
    missing = sorted(named - makefile_targets())
    assert not missing, f"{doc.relative_to(ROOT)} names make targets the Makefile lacks: {missing}"


def test_there_are_guides_to_check():
    assert {p.name for p in (ROOT / "docs").glob("*.md")} >= {"students.md", "hpc-admins.md", "grading.md"}


def test_readme_is_a_page_with_the_router_on_its_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 150, f"README.md has {len(lines)} lines; move detail into docs/"
    first_screen = "\n".join(lines[:50])
    for audience in ("student", "instructor", "HPC staff", "contributor"):
        assert audience in first_screen, f"README's first screen does not route the {audience}"
    assert "make lab" in first_screen and "make test" in first_screen


def test_readme_layout_draws_every_course_lib_folder():
    """Each package folder of course_lib has its line in README's layout tree, at its depth."""
    readme = (ROOT / "README.md").read_text()
    tree = readme[readme.index("## Layout"):].split("```")[1]
    drawn = {(len(line) - len(line.lstrip()), line.split()[0]) for line in tree.splitlines() if line.strip()}
    course_lib = ROOT / "course_lib"
    for package in sorted(course_lib.rglob("__init__.py")):
        folder = package.parent
        depth = len(folder.relative_to(ROOT).parts) - 1
        name = "chNN_<exercise>" if EXERCISE_FOLDER.fullmatch(folder.name) else folder.name  # drawn once
        assert (2 * depth, f"{name}/") in drawn, \
            f"README's layout tree has no line for {folder.relative_to(ROOT)}/ (indented {2 * depth} spaces)"


def _chapter_folders() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def test_every_chapter_is_on_chapter_00s_map_and_in_readme():
    """Chapter 00's map and README's chapter table name every chapter (chapter 11 was missing from both)."""
    import json

    cells = json.loads((ROOT / "solutions" / "00_orientation" / "00_orientation.ipynb").read_text())["cells"]
    the_map = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("## 6. The map"))
    readme = (ROOT / "README.md").read_text()
    for folder in _chapter_folders():
        if folder != "00_orientation":
            assert f"../{folder}/{folder}.ipynb" in the_map, f"chapter 00's map has no row for {folder}"
        assert f"| `{folder}` |" in readme, f"README.md's chapter table has no row for {folder}"
    graded = sum(1 for folder in _chapter_folders()      # a chapter with a graded test cell
                 if '"grade": true' in (ROOT / "solutions" / folder / f"{folder}.ipynb").read_text())
    status = re.search(r"\*\*Status:\*\* chapters 00-(\d+) are written; (\w+) of them", readme)
    assert status, "README's status line should say which chapters exist and how many are graded"
    assert int(status.group(1)) == len(_chapter_folders()) - 1
    words = {"nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
    said = status.group(2)
    assert words.get(said) == graded, f"README's status line says {said} graded chapters, not {graded}"
