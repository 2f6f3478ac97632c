"""Whether a configuration fits: ZeRO's model states, activations, and every pipeline stage's peak.

formulas.py (per-device ZeRO and per-layer activation bytes), plan.py (each stage's peak memory
for a whole configuration).
"""
