"""Predict, then measure: the simulator played on the calibrated machine (``laptop_timelines``), held
against the real run (``predictions``, the comparisons every chapter and benchmarks/bench_predictions.py
share), and chapter 09's bus bandwidth fed back into a cluster (``fed_back``). May import ``plumbing``,
``launch``, ``record``, ``measure`` and ``chapter_runs``.
"""
