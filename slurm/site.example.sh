# shellcheck shell=bash
# Site settings for the course's Slurm jobs: copy to slurm/site.sh and edit; every job sources it.
# Settings given on the sbatch command line or exported before sbatch still win where noted.

# Modules that provide conda/CUDA on the compute nodes, loaded before the Python env is looked up.
# COURSE_MODULES="${COURSE_MODULES:-miniforge cuda/12.4}"

# Which Python: a shared conda env (by name or path) or an explicit interpreter.
# COURSE_CONDA_ENV="${COURSE_CONDA_ENV:-/shared/envs/distributed-course}"
# COURSE_PYTHON="${COURSE_PYTHON:-/shared/envs/distributed-course/bin/python}"

# Fail at once, with instructions, when a job was submitted without --account.
# COURSE_REQUIRE_ACCOUNT=1

# NCCL tuning for this site's network (left to NCCL's defaults when unset).
# export NCCL_SOCKET_IFNAME=ib0
# export NCCL_IB_HCA=mlx5
