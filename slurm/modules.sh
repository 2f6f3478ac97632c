# shellcheck shell=bash
# Sourced by slurm/course_env.sh and by the Open OnDemand app's script.sh: `course_load_modules "a b"`
# makes the `module` command exist in a non-interactive batch shell, then loads the modules;
# `course_activate_conda_env NAME` activates a conda env there.
#
# Batch shells read no login profile, so `module` (Lmod or Environment Modules) is often undefined
# in them: the first init script found below defines it. COURSE_MODULE_INIT names a site's own.

course_module_init_scripts() {
    local lmod_pkg="${LMOD_PKG:-}" modules_home="${MODULESHOME:-}"
    printf '%s\n' "${COURSE_MODULE_INIT:-}" \
        "${lmod_pkg:+$lmod_pkg/init/bash}" "${modules_home:+$modules_home/init/bash}" \
        /etc/profile.d/lmod.sh /etc/profile.d/z00_lmod.sh /etc/profile.d/modules.sh \
        /usr/share/lmod/lmod/init/bash /usr/share/modules/init/bash
}

# Defines `module` if it is missing; fails when no init script provides it.
course_init_module_command() {
    type module >/dev/null 2>&1 && return 0
    local init
    while IFS= read -r init; do
        [[ -n "$init" && -f "$init" ]] || continue
        # shellcheck source=/dev/null
        source "$init"
        type module >/dev/null 2>&1 && return 0
    done < <(course_module_init_scripts)
    return 1
}

# `course_load_modules "cuda/12.4 miniforge"`: nothing for an empty list; a message and status 1
# when `module` cannot be set up or a module fails to load.
course_load_modules() {
    local modules="${1:-}" nounset=0 status=0
    [[ -n "$modules" ]] || return 0
    # Site init scripts and `module` itself often read unset variables: relax `set -u` meanwhile.
    [[ $- == *u* ]] && nounset=1
    set +u
    if ! course_init_module_command; then
        echo "error: modules '$modules' were asked for, but this node has no 'module' command and no" \
            "Lmod or Environment Modules init script (set COURSE_MODULE_INIT=/path/to/init/bash)" >&2
        status=1
    else
        # shellcheck disable=SC2086  # a list of module names
        module load $modules || {
            echo "error: module load $modules failed" >&2
            status=1
        }
    fi
    ((nounset)) && set -u
    return "$status"
}

# `course_activate_conda_env NAME_OR_PATH`: conda's shell hook, then `conda activate`, in this shell.
# Activation scripts of conda packages often read unset variables, which under `set -u` would end
# the whole batch shell without a word: `set -u` is relaxed meanwhile, as for `module` above, and
# conda's own message stays visible. Status 1, with the reason, when activation fails.
course_activate_conda_env() {
    local env_name="${1:?usage: course_activate_conda_env NAME_OR_PATH}" nounset=0 status=0 hook
    [[ $- == *u* ]] && nounset=1
    set +u
    if ! hook="$(conda shell.bash hook)"; then
        echo "error: 'conda shell.bash hook' failed (see above): is conda installed and its module loaded?" >&2
        status=1
    elif ! eval "$hook" || ! conda activate "$env_name" >/dev/null; then
        echo "error: conda activate $env_name failed (conda's message is above)" >&2
        status=1
    fi
    ((nounset)) && set -u
    return "$status"
}
