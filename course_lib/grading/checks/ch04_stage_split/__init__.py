"""Chapter 04's stage split, graded: visible.py (what the notebook imports), ranks.py (the split run for
real on gloo ranks), judge.py (what the hidden checks say about a split and its real run).
"""
