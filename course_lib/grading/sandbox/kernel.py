"""Kernel launcher for grading: enters the sandbox, then becomes an ordinary ipykernel (same pid).

The grading kernelspec's argv is ``python -m course_lib.grading.sandbox.kernel POLICY_FILE -f
{connection_file}``; jupyter_client signals and kills this pid, and exec keeps it the kernel's.
"""

from __future__ import annotations

import os
import shutil
import sys

from course_lib.grading.sandbox.policy import JUDGED_APART_ENV, SandboxPolicy, hidden_check_folders
from course_lib.real.plumbing.graded_run import GRADED_RUN_ENV
from course_lib.real.plumbing.processes import exec_python

KERNEL_OUTPUT = "kernel-output.log"   # in the kernel's home


def main(argv: list[str]) -> None:
    if len(argv) != 3 or argv[1] != "-f":
        raise SystemExit("usage: python -m course_lib.grading.sandbox.kernel POLICY_FILE -f CONNECTION_FILE")
    policy_file, _, connection_file = argv
    with open(policy_file) as handle:
        policy = SandboxPolicy.from_json(handle.read())
    if policy.judged_apart:
        # The hidden checks compute the expected answers: the kernel, which runs the student's code, never
        # reads them; its hidden test cells leave their verdict to the isolated judge (hidden_checks.py).
        policy.hidden_paths = [*policy.hidden_paths, *hidden_check_folders()]
        os.environ[JUDGED_APART_ENV] = "1"
    # The connection file is private to the grader; the kernel gets its own copy in its home.
    os.makedirs(policy.home, exist_ok=True)
    private_copy = os.path.join(policy.home, "kernel-connection.json")
    shutil.copyfile(connection_file, private_copy)
    if os.geteuid() == 0:
        os.chown(policy.home, policy.uid, policy.gid)
        os.chown(private_copy, policy.uid, policy.gid)
    # The kernel's own stdout and stderr (what the student's code writes to fd 1 and 2, its children's
    # too) go to a file in its home, capped by the file size limit: never into nbgrader's log, which the
    # grader reads (failures.py), nor into the grading parent's memory.
    own_output = os.open(os.path.join(policy.home, KERNEL_OUTPUT), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                         0o600)
    if os.geteuid() == 0:
        os.fchown(own_output, policy.uid, policy.gid)
    for line in policy.enter():
        print(f"[grading sandbox] {line}", file=sys.stderr, flush=True)
    for fd in (1, 2):
        os.dup2(own_output, fd)
    os.close(own_output)
    # the lesson's timing cells measure briefly for the grader (course_lib.real.plumbing.graded_run)
    os.environ[GRADED_RUN_ENV] = "1"
    exec_python(["-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", private_copy])


if __name__ == "__main__":
    main(sys.argv[1:])
