"""Chapter 10's ring attention graded on its overlap and its backward: visible.py, ranks.py, judge.py."""
