# shellcheck shell=bash
# Sourced by every slurm/*.sbatch: finds the course's Python, picks NCCL or gloo, sets up the
# rendezvous on the job's first node, and launches one torchrun per node with `course_launch`.
#
# Settings (environment variables; sbatch passes the submitting shell's environment to the job):
#   COURSE_DIR             the course checkout (default: found by the sbatch script); not settable
#                          in site.sh, which is read from $COURSE_DIR/slurm/site.sh
#   COURSE_PYTHON          the Python to use (default: $COURSE_DIR/.venv, else the conda env
#                          named in environment.yml, else an error)
#   COURSE_CONDA_ENV       conda env name or path (default: `name:` from environment.yml)
#   COURSE_MODULES         modules to `module load` first, e.g. "cuda/12.4 miniforge"
#   COURSE_MODULE_INIT     the script that defines `module` in a batch shell (default: the usual
#                          Lmod and Environment Modules locations, see slurm/modules.sh)
#   COURSE_BACKEND         nccl or gloo (default: nccl when the job has GPUs, gloo otherwise)
#   COURSE_PROCS_PER_NODE  ranks per node (default: GPUs per node, else --ntasks-per-node)
#   COURSE_MASTER_PORT     rendezvous port on the first node (default: 29500 + job id % 10000)
#   COURSE_RUN_DIR         per-job output folder (default: <submit dir>/runs/<job name>-<job id>)
#   COURSE_NCCL_DEBUG      NCCL_DEBUG level for this job (default: NCCL_DEBUG is unset, i.e. quiet)
#   COURSE_REQUIRE_ACCOUNT 1: fail at once when the job was submitted without an account
# A site can set any of them but COURSE_DIR once for everybody in slurm/site.sh (see
# slurm/site.example.sh); it is sourced before any of them is read.

course_die() {
    echo "error: $*" >&2
    exit 1
}

[[ -n "${SLURM_JOB_ID:-}" ]] ||
    course_die "this script runs inside a Slurm job: submit it with sbatch (e.g. sbatch slurm/ddp.sbatch)"
COURSE_DIR="$(cd "${COURSE_DIR:?COURSE_DIR must be set before sourcing course_env.sh}" && pwd)"
export COURSE_DIR

# Site settings come first, so that every COURSE_* setting below (COURSE_RUN_DIR included) can come
# from there. COURSE_DIR cannot: it is how site.sh is found.
if [[ -f "$COURSE_DIR/slurm/site.sh" ]]; then
    COURSE_DIR_FOUND="$COURSE_DIR"
    # shellcheck source=/dev/null
    source "$COURSE_DIR/slurm/site.sh"
    [[ -n "${COURSE_DIR:-}" && "$(cd "$COURSE_DIR" 2>/dev/null && pwd)" == "$COURSE_DIR_FOUND" ]] ||
        course_die "slurm/site.sh may not change COURSE_DIR ($COURSE_DIR_FOUND -> ${COURSE_DIR:-}):" \
            "site.sh is read from the checkout COURSE_DIR names. Export COURSE_DIR before sbatch," \
            "or submit from inside the checkout"
    unset COURSE_DIR_FOUND
fi

# Everything the job prints also lands in its own folder (job.log), next to a record of its setup.
COURSE_RUNS="${SLURM_SUBMIT_DIR:-$PWD}/runs"
COURSE_RUN_DIR="${COURSE_RUN_DIR:-$COURSE_RUNS/${SLURM_JOB_NAME:-job}-$SLURM_JOB_ID}"
mkdir -p "$COURSE_RUN_DIR" || course_die "cannot create the job's output folder $COURSE_RUN_DIR"
# Jobs are often submitted from the checkout: keep the default runs/ folder out of git.
if [[ "$COURSE_RUN_DIR" == "$COURSE_RUNS/"* && ! -e "$COURSE_RUNS/.gitignore" ]]; then
    echo '*' >"$COURSE_RUNS/.gitignore"
fi
export COURSE_RUN_DIR
exec > >(tee -a "$COURSE_RUN_DIR/job.log") 2>&1
COURSE_TEE_PID=$!

# On exit, let tee write its last lines before Slurm ends the job's processes.
course_flush_log() {
    local status=$?
    exec 1>&- 2>&-
    wait "$COURSE_TEE_PID" 2>/dev/null
    exit "$status"
}
trap course_flush_log EXIT

if [[ "${COURSE_REQUIRE_ACCOUNT:-0}" == 1 && -z "${SLURM_JOB_ACCOUNT:-}" ]]; then
    course_die "this site charges every job to an account, and this job has none. Submit with" \
        "sbatch --account=<your account> ..., or export SBATCH_ACCOUNT=<your account> first" \
        "(list yours with: sacctmgr show associations user=\$USER format=account)"
fi

# shellcheck source=slurm/modules.sh
source "$COURSE_DIR/slurm/modules.sh"
course_load_modules "${COURSE_MODULES:-}" || exit 1

# Activates the conda env named in environment.yml (or COURSE_CONDA_ENV) in this shell; status 1
# when there is no conda or no env name, and the job ends with conda's reason when activation fails.
course_activate_conda() {
    local env_name="${COURSE_CONDA_ENV:-}"
    if [[ -z "$env_name" && -f "$COURSE_DIR/environment.yml" ]]; then
        env_name="$(awk -F': *' '/^name:/ {print $2; exit}' "$COURSE_DIR/environment.yml")"
    fi
    [[ -n "$env_name" ]] && command -v conda >/dev/null 2>&1 || return 1
    course_activate_conda_env "$env_name" ||
        course_die "the course's conda env '$env_name' could not be activated (see above); create it with" \
            "'conda env create -f environment.yml' in $COURSE_DIR, or set COURSE_CONDA_ENV/COURSE_PYTHON"
}

if [[ -z "${COURSE_PYTHON:-}" ]]; then
    if [[ -x "$COURSE_DIR/.venv/bin/python" ]]; then
        COURSE_PYTHON="$COURSE_DIR/.venv/bin/python"
    elif course_activate_conda; then
        COURSE_PYTHON="$(command -v python)"
    else
        course_die "no Python environment for the course found. Create one in the checkout" \
            "($COURSE_DIR): 'make setup' (a .venv) or 'conda env create -f environment.yml';" \
            "or point COURSE_PYTHON at a python that has torch installed"
    fi
fi
export COURSE_PYTHON
[[ -x "$COURSE_PYTHON" ]] || course_die "COURSE_PYTHON=$COURSE_PYTHON is not an executable python"
export PYTHONPATH="$COURSE_DIR${PYTHONPATH:+:$PYTHONPATH}"
# Checked without importing torch (fast); a missing package would otherwise fail on every rank.
"$COURSE_PYTHON" -c 'import importlib.util as u, sys
missing = [m for m in ("torch", "course_lib") if u.find_spec(m) is None]
sys.exit("error: " + sys.executable + " lacks " + ", ".join(missing) if missing else 0)' || exit 1

# GPUs come from the submission (sbatch --gpus-per-node=N, or SBATCH_GPUS_PER_NODE=N).
COURSE_GPUS_PER_NODE="${SLURM_GPUS_ON_NODE:-0}"
if [[ "$COURSE_GPUS_PER_NODE" == 0 && -n "${SLURM_JOB_GPUS:-}" ]]; then
    COURSE_GPUS_PER_NODE="$(tr ',' '\n' <<<"$SLURM_JOB_GPUS" | grep -c .)"
fi
if [[ -z "${COURSE_BACKEND:-}" ]]; then
    COURSE_BACKEND="$( ((COURSE_GPUS_PER_NODE > 0)) && echo nccl || echo gloo)"
fi
[[ "$COURSE_BACKEND" == nccl || "$COURSE_BACKEND" == gloo ]] ||
    course_die "COURSE_BACKEND must be nccl or gloo, not '$COURSE_BACKEND'"
export COURSE_BACKEND

# Ranks per node: one per GPU, else one per task the job asked for on each node.
course_procs_per_node() {
    if [[ -n "${COURSE_PROCS_PER_NODE:-}" ]]; then
        echo "$COURSE_PROCS_PER_NODE"
    elif [[ "$COURSE_BACKEND" == nccl ]]; then
        echo "$COURSE_GPUS_PER_NODE"
    elif [[ -n "${SLURM_NTASKS_PER_NODE:-}" ]]; then
        echo "$SLURM_NTASKS_PER_NODE"
    else
        # SLURM_TASKS_PER_NODE looks like "2(x3)" or "3,1"; torchrun needs the same count everywhere.
        local counts
        counts="$(sed -E 's/\(x[0-9]+\)//g' <<<"${SLURM_TASKS_PER_NODE:-1}" | tr ',' '\n' | sort -u)"
        [[ "$(grep -c . <<<"$counts")" == 1 ]] ||
            course_die "tasks per node differ ($SLURM_TASKS_PER_NODE); submit with --ntasks-per-node=N"
        echo "$counts"
    fi
}
COURSE_PROCS_PER_NODE="$(course_procs_per_node)" || exit 1
[[ "$COURSE_PROCS_PER_NODE" =~ ^[1-9][0-9]*$ ]] ||
    course_die "ranks per node must be a positive number, got '$COURSE_PROCS_PER_NODE'"
COURSE_NNODES="${SLURM_JOB_NUM_NODES:-1}"

# The batch script runs on the job's first node, so this is a compute node, never the login node.
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
MASTER_PORT="${COURSE_MASTER_PORT:-$((29500 + SLURM_JOB_ID % 10000))}"
export MASTER_ADDR MASTER_PORT
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"

if [[ -n "${COURSE_NCCL_DEBUG:-}" ]]; then
    export NCCL_DEBUG="$COURSE_NCCL_DEBUG"
else
    unset NCCL_DEBUG NCCL_DEBUG_SUBSYS
fi

# Run `target` (module:function) on every rank: one torchrun per node, joined by c10d rendezvous.
course_launch() {
    local target="${1:?usage: course_launch module:function [args...]}"
    shift
    local world_size=$((COURSE_NNODES * COURSE_PROCS_PER_NODE))
    {
        echo "job $SLURM_JOB_ID ($SLURM_JOB_NAME) on $SLURM_JOB_NODELIST, partition ${SLURM_JOB_PARTITION:-?}"
        echo "target $target, $COURSE_NNODES node(s) x $COURSE_PROCS_PER_NODE rank(s) = $world_size, backend $COURSE_BACKEND"
        echo "rendezvous $MASTER_ADDR:$MASTER_PORT, python $COURSE_PYTHON, output $COURSE_RUN_DIR"
    } | tee "$COURSE_RUN_DIR/setup.txt"
    # A step inherits the job's per-task requests (a job sent with --gpus-per-task=1 exports
    # SLURM_GPUS_PER_TASK=1), but this step runs one task per node that needs all the node's GPUs:
    # ask for them explicitly.
    local gpus=()
    ((COURSE_GPUS_PER_NODE > 0)) && gpus=(--gpus-per-task="$COURSE_GPUS_PER_NODE")
    srun --nodes="$COURSE_NNODES" --ntasks="$COURSE_NNODES" --ntasks-per-node=1 \
        --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" "${gpus[@]}" --kill-on-bad-exit=1 \
        "$COURSE_PYTHON" -m torch.distributed.run \
        --nnodes="$COURSE_NNODES" --nproc-per-node="$COURSE_PROCS_PER_NODE" \
        --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID" \
        --max-restarts=0 \
        -m course_lib.real.launch.torchrun "$target" "$@"
}
