"""Many steps: a closed-form step time to rank layouts, the layout search, and published runs to hold to.

estimate.py (step time without a timeline), search.py (search_layouts), published.py (production
runs with their settings and measured MFU).
"""
