# shellcheck shell=bash
# Site settings for the course's Slurm jobs: copy to slurm/site.sh and edit; every job sources it
# first thing, before any COURSE_* setting is read, so any of them can be set here except one:
# COURSE_DIR. This file is found as $COURSE_DIR/slurm/site.sh, so COURSE_DIR is already fixed when
# it is read (a job whose site.sh changes it stops with an error). Students give COURSE_DIR
# themselves: submit from inside the checkout, or export COURSE_DIR=/path/to/checkout before sbatch.
# Settings given on the sbatch command line or exported before sbatch still win where noted.

# Modules that provide conda/CUDA on the compute nodes, loaded before the Python env is looked up.
# COURSE_MODULES="${COURSE_MODULES:-miniforge cuda/12.4}"

# Which Python: a shared conda env (by name or path) or an explicit interpreter.
# COURSE_CONDA_ENV="${COURSE_CONDA_ENV:-/shared/envs/distributed-course}"
# COURSE_PYTHON="${COURSE_PYTHON:-/shared/envs/distributed-course/bin/python}"

# Job output folders on scratch instead of <submit folder>/runs/ (SLURM_JOB_NAME and SLURM_JOB_ID
# are set when this file is read).
# COURSE_RUN_DIR="${COURSE_RUN_DIR:-/scratch/$USER/course-runs/$SLURM_JOB_NAME-$SLURM_JOB_ID}"

# Where `module` comes from when the nodes' batch shells lack it and it is not in a usual place
# (slurm/modules.sh tries Lmod's and Environment Modules' standard init scripts).
# COURSE_MODULE_INIT=/opt/lmod/lmod/init/bash

# Fail at once, with instructions, when a job was submitted without --account.
# COURSE_REQUIRE_ACCOUNT=1

# The network interface for the ranks' traffic (left to the libraries' defaults when unset): NCCL's
# for GPU jobs, and gloo's (PyTorch's CPU backend, used by the CPU-only multi-node runs) beside it,
# since a node's first interface is often one the other nodes cannot reach.
# export NCCL_SOCKET_IFNAME=ib0
# export GLOO_SOCKET_IFNAME=ib0
# export NCCL_IB_HCA=mlx5

# Grading a class as a job array (make grade SLURM=1, docs/instructors.md "Grading on a cluster"):
# where the tasks run, who pays, how many there are and how long one submission may take. Make
# variables and CLI flags (TASKS=, PARTITION=, ACCOUNT=, MINUTES_PER_SUBMISSION=) win over these.
# COURSE_GRADE_PARTITION=cpu
# COURSE_GRADE_ACCOUNT=course-staff
# COURSE_GRADE_TASKS=16
# COURSE_GRADE_MINUTES_PER_SUBMISSION=2
# COURSE_GRADE_CPUS_PER_TASK=2
