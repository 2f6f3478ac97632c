"""course_lib's import layers: no import from a lower layer to a higher one (between course_lib's packages,
between sim's sub-packages and between real's rooms), no import circle between folders, and nothing in
course_lib names the instructor's folders (the grading run's settings do).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.import_layers import back_imports, folder_cycles, names_in_imports, unit_of

ROOT = Path(__file__).resolve().parents[1] / "course_lib"

# Bottom to top: a unit may import its own layer and those below. The grading folders follow a check's
# life: the sandbox cages it, attempt runs student code, checks judge, the autograder grades a class.
LAYERS = [
    ("__init__.py", "moved_modules.py", "notebook_cells.py"),
    ("sim",),
    ("models.py",),
    ("real",),
    ("viz",),
    ("examples",),
    ("capstone",),
    ("grading/__init__.py", "grading/settings.py", "grading/student_text.py"),
    ("grading/sandbox",),
    ("grading/attempt",),
    ("grading/checks",),
    ("grading/autograder",),
    ("grading/slurm",),
    ("grading/cli.py",),
]
# Inside sim: the names every layer reads, the network, then each step of a simulation in order.
SIM_LAYERS = [
    ("sim/__init__.py", "sim/checks.py", "sim/vocabulary.py", "sim/timeline.py", "sim/trace.py"),
    ("sim/network",),
    ("sim/memory",),
    ("sim/collectives",),
    ("sim/cluster",),
    ("sim/job",),
    ("sim/step",),
    ("sim/search",),
    ("sim/devices",),
]
# Inside real: the process plumbing, then starting ranks, recording them, measuring the machine, timing a
# chapter's workload, predicting it; PyTorch's own implementations and the cluster sit on top. Launching
# neither records nor measures; recording never measures.
REAL_LAYERS = [
    ("real/__init__.py",),
    ("real/plumbing",),
    ("real/launch",),
    ("real/record",),
    ("real/measure",),
    ("real/chapter_runs",),
    ("real/predict",),
    ("real/pytorch",),
    ("real/cluster",),
]
INSTRUCTOR_FOLDERS = ("instructor", "autograde_tests")


def test_every_module_of_course_lib_has_its_layer():
    """A module no layer lists escapes every rule above: a new file at a package's top joins a layer."""
    unlisted = [str(path.relative_to(ROOT)) for path in sorted(ROOT.rglob("*.py"))
                if unit_of(path, ROOT, LAYERS) is None]
    assert not unlisted, f"add these to a layer of LAYERS: {unlisted}"


def test_no_package_imports_a_higher_layer():
    assert not back_imports(ROOT, LAYERS), "\n".join(back_imports(ROOT, LAYERS))


def test_no_sim_sub_package_imports_a_higher_layer():
    problems = back_imports(ROOT, SIM_LAYERS, within="sim")
    assert not problems, "\n".join(problems)


def test_no_room_of_real_imports_a_higher_room():
    problems = back_imports(ROOT, REAL_LAYERS, within="real")
    assert not problems, "\n".join(problems)


def test_real_has_no_module_outside_its_rooms():
    """Every module of course_lib.real lives in a room, and no room grows past nine files."""
    real = ROOT / "real"
    assert sorted(path.name for path in real.glob("*.py")) == ["__init__.py"]
    rooms = sorted(path for path in real.iterdir() if path.is_dir() and path.name != "__pycache__")
    assert [f"real/{room.name}" for room in rooms] == sorted(unit for (unit,) in REAL_LAYERS[1:])
    for room in rooms:
        files = sorted(path.name for path in room.glob("*.py"))
        assert "__init__.py" in files and len(files) < 10, (room.name, files)
        says_what_lives_there = (room / "__init__.py").read_text().startswith('"""')
        assert says_what_lives_there, f"{room.name}/__init__.py has no docstring"


def test_no_import_circle_between_folders():
    assert not folder_cycles(ROOT, LAYERS), folder_cycles(ROOT, LAYERS)


def test_course_lib_never_names_the_instructors_folders():
    found = names_in_imports(ROOT, INSTRUCTOR_FOLDERS)
    assert not found, "\n".join(found)


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "course_lib"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_a_deliberate_back_import_fails_each_rule(tmp_path):
    """The rules are not vacuous: one added line breaks each of them."""
    copy = _copy(tmp_path)
    plan = copy / "sim" / "memory" / "formulas.py"
    plan.write_text(plan.read_text() + "\nfrom ..step.schedules import pipeline_schedule  # a back-import\n")
    wire = copy / "real" / "record" / "wire.py"
    wire.write_text(wire.read_text() + "\nfrom course_lib.grading.checks import ch02_ring  # a back-import\n")
    runner = copy / "real" / "launch" / "runner.py"
    runner.write_text(runner.read_text() + "\nfrom ..record.wire import wire_bytes  # a back-import\n")
    traffic = copy / "real" / "record" / "traffic_log.py"
    traffic.write_text(traffic.read_text() + "\nfrom ..measure import timing_harness  # a back-import\n")
    policy = copy / "grading" / "sandbox" / "policy.py"
    policy.write_text(policy.read_text() + "\nfrom course_lib.grading.attempt import isolation  # a circle\n")
    leak = copy / "grading" / "settings.py"
    leak.write_text(leak.read_text() + '\nREGISTRY = "instructor/registry.py"\n')

    assert any("sim/memory/formulas.py" in p and "sim/step" in p
               for p in back_imports(copy, SIM_LAYERS, within="sim"))
    assert any("real/record/wire.py" in p and "grading/checks" in p for p in back_imports(copy, LAYERS))
    real_problems = back_imports(copy, REAL_LAYERS, within="real")
    assert any("real/launch/runner.py" in p and "real/record" in p for p in real_problems)
    assert any("real/record/traffic_log.py" in p and "real/measure" in p for p in real_problems)
    cycles = folder_cycles(copy, LAYERS)
    assert any("grading/sandbox" in cycle and "grading/attempt" in cycle for cycle in cycles)
    assert any("settings.py" in p and "'instructor'" in p for p in names_in_imports(copy, INSTRUCTOR_FOLDERS))
