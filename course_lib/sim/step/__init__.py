"""One training step, in the order it is simulated: per-layer costs, pipeline schedule, events, report.

costs.py -> schedules.py (pipeline schedules) -> memory_plan.py (each stage's peak memory, the schedule
played) -> lowering.py (one stage's events) -> training_step.py (simulate_training_step) -> step_report.py.
"""
