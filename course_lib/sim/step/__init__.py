"""One training step, in the order it is simulated: per-layer costs, pipeline schedule, events, report.

costs.py -> schedules.py (pipeline schedules) -> lowering.py (one stage's events) -> training_step.py
(simulate_training_step) -> step_report.py (StepReport).
"""
