"""Whether a configuration fits, per device: ZeRO's model states and per-layer activations (formulas.py).

Each pipeline stage's peak for a whole configuration is step/memory_plan.py: it plays the schedule.
"""
