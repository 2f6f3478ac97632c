"""course_lib.sim stays plain Python: importing it loads neither torch nor matplotlib."""

import subprocess
import sys


def test_sim_imports_without_torch_or_matplotlib():
    code = ("import sys, course_lib.sim; "
            "print(sorted(m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
