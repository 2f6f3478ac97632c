#!/usr/bin/env bash
# Stand-in for the job script Open OnDemand's "basic" batch-connect template builds around an app:
# the same helper functions, then before.sh (sourced), script.sh (forked), after.sh (sourced) and
# connection.yml. The tests sbatch it with the rendered app's staged folder as the argument.
#SBATCH --job-name=ood-course-jupyter
set -uo pipefail
cd "${1:?usage: ood_job_wrapper.sh STAGED_TEMPLATE_DIR}" || exit 1

port_used() {
    local address="$1"
    (exec 3<>"/dev/tcp/${address%:*}/${address##*:}") 2>/dev/null
}
find_port() {
    local candidate
    while :; do
        candidate="$(shuf -i "${2:-2000}-${3:-65535}" -n 1)"
        port_used "${1:-localhost}:${candidate}" || { echo "$candidate"; return; }
    done
}
wait_until_port_used() {
    local i
    for ((i = 0; i < ${2:-30} * 2; i++)); do
        port_used "$1" && return 0
        sleep 0.5
    done
    return 1
}
create_passwd() {
    tr -cd '[:alnum:]' </dev/urandom | head -c "${1:-32}"
}
clean_up() {
    [[ -n "${SCRIPT_PID:-}" ]] && kill "$SCRIPT_PID" 2>/dev/null
    exit "${1:-0}"
}
trap clean_up TERM

export host
host="$(hostname)"
# shellcheck source=/dev/null
source ./before.sh
./script.sh &
SCRIPT_PID=$!
# shellcheck source=/dev/null
source ./after.sh
# shellcheck disable=SC2154  # port and password come from before.sh
(umask 077 && printf 'host: %s\nport: %s\npassword: %s\n' "$host" "$port" "$password" >connection.yml)
wait "$SCRIPT_PID"
