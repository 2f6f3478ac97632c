"""Chapter 11's MoE as DeepSeek-V3 runs it, graded: visible.py, ranks.py where ranks run, judge.py."""
