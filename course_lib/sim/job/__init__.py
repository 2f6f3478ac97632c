"""What is trained and how it is split: the model, the validated step configuration, the rank layout.

model_specs.py (transformer and MLP specs), config.py (StepConfig), layout.py (ranks, groups, stages),
strategies.py (the course's named 0D-4D options).
"""
