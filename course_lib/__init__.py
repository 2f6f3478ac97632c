"""Shared library of the distributed-training course.

Subpackages: ``sim`` (virtual-clock cluster simulator), ``dist`` (real multi-process runs),
``viz`` (drawings and widgets), ``examples`` (one runnable entry point per strategy),
``grading`` (checks the exercises share). ``models`` holds the course's running examples.
"""

__version__ = "0.1.0"
