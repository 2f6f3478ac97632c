"""Chapter 05's 1F1B schedule and pipeline stage, graded: visible.py, ranks.py, judge.py."""
