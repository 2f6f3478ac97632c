# The commands README.md names. `make lab` and `make test` each work on a fresh clone: both depend on
# `setup`, which is quick and does nothing when pyproject.toml has not changed since the last run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.course-setup-done
KERNEL := distributed-course

# Where pip may also look for PyTorch. "auto" (tools/torch_index.py): PyTorch's CPU build on a Linux
# x86-64 machine without an NVIDIA GPU, whose PyPI build bundles CUDA (gigabytes), when that index
# answers; PyPI otherwise. `make lab TORCH_INDEX=` forces PyPI, `TORCH_INDEX=<url>` another index.
TORCH_INDEX ?= auto

# JupyterLab options: override on the command line, e.g. `make lab PORT=9999 IP=0.0.0.0`.
PORT ?= 8888
IP   ?= localhost
# Open a browser only where there is a screen (macOS, or an X/Wayland display); on a remote node,
# an Open OnDemand session or CI, JupyterLab just prints its URL with the token.
OPEN_BROWSER := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),True,False)
# Containers and CI often run as root, which JupyterLab refuses unless told.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

# Which assignment `make grade` works on: `make grade ASSIGNMENT=02_collectives` (default: all), and
# optionally a folder of zip submissions to collect first: `make grade ZIPS=~/downloads/submissions`.
ASSIGNMENT ?=
ZIPS ?=
# Students graded at once (default: the cores, at most 4): `make grade JOBS=8` on a bigger machine.
JOBS ?=
# The rest of the grading CLI's options: ZIP_PATTERN (a named regexp for zip names, docs/instructors.md
# has Canvas's and Moodle's), CELL_TIMEOUT (seconds per cell), FIRST_UID (sandbox uids from this one).
ZIP_PATTERN ?=
CELL_TIMEOUT ?=
FIRST_UID ?=
# `make grade` grades only new or changed submissions; REGRADE=1 grades every one again.
REGRADE ?=
# `make extend ASSIGNMENT=02_collectives STUDENT=ada DAYS=2 HOURS=6` (DAYS=0 HOURS=0: take it back).
STUDENT ?=
DAYS ?= 0
HOURS ?= 0
# Grading on a Slurm cluster as a job array: `make grade SLURM=1 TASKS=16 PARTITION=cpu ACCOUNT=course`;
# MINUTES_PER_SUBMISSION sets each task's time limit (docs/grading.md). Site defaults: slurm/site.sh.
SLURM ?=
TASKS ?=
PARTITION ?=
ACCOUNT ?=
MINUTES_PER_SUBMISSION ?=
GRADE_SLURM_ARGS = $(if $(SLURM),--slurm,) $(if $(TASKS),--tasks $(TASKS),) \
	$(if $(PARTITION),--partition $(PARTITION),) $(if $(ACCOUNT),--account $(ACCOUNT),) \
	$(if $(MINUTES_PER_SUBMISSION),--minutes-per-submission $(MINUTES_PER_SUBMISSION),)

.PHONY: setup lab test test-fast lint release grade extend export grade-demo student-kit bench slurm-up slurm-down hub-up hub-down \
	clean help

help:
	@echo "make lab        set up (once) and open the course in JupyterLab"
	@echo "make test       set up (once) and run the whole test-suite (lint, unit, notebooks, slurm, browser)"
	@echo "make test-fast  course_lib unit tests only (under a minute)"
	@echo "make release    regenerate notebooks/ from solutions/ with nbgrader"
	@echo "make grade      autograde new or changed submissions under grading/submitted (REGRADE=1: all)"
	@echo "make extend     give STUDENT more time (DAYS, HOURS) on ASSIGNMENT"
	@echo "make export     grades and feedback for Canvas and Moodle, in grading/exports/"
	@echo "make grade-demo grade a generated demo class end to end"
	@echo "make student-kit build/student-kit/ and .zip: what students get, no answers (GIT=1: a git repo)"
	@echo "make bench      run the speed benchmarks (simulator, real processes, ring, grading)"
	@echo "make slurm-up   start a local single-node Slurm (root; Debian's slurm-wlm and munge)"
	@echo "make slurm-down stop it again"
	@echo "make hub-up     start the course's JupyterHub for a class (root; docs/jupyterhub.md)"
	@echo "make hub-down   stop it, and every student's server"
	@echo "make clean      remove the virtual environment and caches (grades and job outputs are kept)"

setup: $(STAMP) grading

# The class's grading state (gradebook, submissions, grades): the grader's alone, made before the first
# documented command (nbgrader db student import, nbgrader db assignment add) needs it.
grading:
	install -d -m 0700 grading

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "the course needs Python 3.11 or newer: run make PYTHON=python3.11 ..."'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	index=$$($(PYTHON) tools/torch_index.py "$(TORCH_INDEX)") && \
		$(BIN)/python -m pip install --quiet $${index:+--extra-index-url "$$index"} -e '.[test]'
	# jsonschema imports rfc3987-syntax whenever it is installed (jupyter-events asks for it), and that builds
	# a lark grammar at import: 1.7 s of CPU in every process that imports nbformat (each nbgrader command,
	# judge and notebook run of a grading). It checks only the "iri" formats, which no schema here uses.
	$(BIN)/python -m pip uninstall --quiet --yes rfc3987-syntax lark
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python 3 (distributed course)"
	$(BIN)/jupyter labextension enable --level=sys_prefix @jupyter-widgets/jupyterlab-manager @jupyter/nbgrader >/dev/null
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --ServerApp.port=$(PORT) --ServerApp.ip=$(IP) \
		--ServerApp.open_browser=$(OPEN_BROWSER) $(ALLOW_ROOT)

lint: setup
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest --durations=40

test-fast: setup
	$(BIN)/python -m pytest tests -m "not slow and not slurm and not browser" -q

release: setup
	$(BIN)/python tools/release.py

grade: setup
	$(BIN)/python -m course_lib.grading.cli grade $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT),) $(if $(ZIPS),--zips $(ZIPS),) \
		$(if $(ZIP_PATTERN),--zip-pattern '$(ZIP_PATTERN)',) $(if $(JOBS),--jobs $(JOBS),) \
		$(if $(CELL_TIMEOUT),--cell-timeout $(CELL_TIMEOUT),) $(if $(FIRST_UID),--first-uid $(FIRST_UID),) \
		$(if $(REGRADE),--regrade,) $(GRADE_SLURM_ARGS)

extend: setup
	$(BIN)/python -m course_lib.grading.cli extend --assignment '$(ASSIGNMENT)' --student '$(STUDENT)' \
		--days '$(DAYS)' --hours '$(HOURS)'

export: setup
	$(BIN)/python -m course_lib.grading.cli export

grade-demo: setup
	$(BIN)/python -m course_lib.grading.cli demo $(if $(JOBS),--jobs $(JOBS),) $(GRADE_SLURM_ARGS)

student-kit: setup
	$(BIN)/python tools/student_kit.py $(if $(GIT),--git,)

bench: setup
	for script in benchmarks/bench_*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

slurm-up:
	slurm/local/start.sh

slurm-down:
	slurm/local/stop.sh

# The class's JupyterHub (slurm/hub/): its Python packages (the [hub] extra: jupyterhub, batchspawner)
# go into the course's environment if they are missing; start.sh says what else it needs.
hub-up:
	@test -x $(BIN)/python || { echo "no course environment in $(VENV): run make setup first" >&2; exit 1; }
	$(BIN)/python -c 'import jupyterhub, batchspawner' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[hub]'
	slurm/hub/start.sh

hub-down:
	slurm/hub/stop.sh

# Slurm job outputs from jobs submitted in the checkout (runs/ and sbatch's course-*.out) are kept:
# they are results (a cluster's measurements, a job's log) that only more cluster time would bring
# back, not build products, and git already ignores them. Delete them by hand when done with them.
# Results are kept: a class's grades (grading/, but for the generated demo) and Slurm job outputs.
clean:
	rm -rf $(VENV) grading/demo test-artifacts .pytest_cache .ruff_cache build/student-kit build/student-kit.zip
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
	@if [ -e grading ]; then \
		echo "kept the class's grading state (grading/: submissions, gradebook, feedback); delete it by hand"; \
	fi
	@if [ -e runs ] || ls course-*.out >/dev/null 2>&1; then \
		echo "kept Slurm job outputs (runs/, course-*.out); delete them by hand when done: rm -rf runs course-*.out"; \
	fi
