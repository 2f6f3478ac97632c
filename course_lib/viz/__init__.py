"""Drawings and widgets of the course: timelines, memory bars, placements and ipywidgets explorers.

They draw what ``course_lib.sim`` (and ``course_lib.real``) produce and start nothing themselves.
"""

from .explorers import data_parallel_explorer, layout_explorer, pipeline_explorer, zero_memory_explorer
from .memory_plot import plot_memory
from .placement_plot import plot_placement
from .timeline_plot import plot_timeline, plot_timelines

__all__ = ["data_parallel_explorer", "layout_explorer", "pipeline_explorer", "plot_memory",
           "plot_placement", "plot_timeline", "plot_timelines", "zero_memory_explorer"]
