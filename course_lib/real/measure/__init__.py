"""This machine measured for the simulator: the one timing harness every measuring cell uses
(``timing_harness``: the statistic, the warm-up, the graded run's cap), and ``calibrate()``
(``calibration``, with the blocks it times on its ranks in ``calibration_blocks``). May import
``plumbing``, ``launch``, ``record`` and ``course_lib.sim``.
"""
