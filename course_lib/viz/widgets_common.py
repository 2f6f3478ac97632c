"""What every explorer shares: an Output that redraws on each change and a text line for the numbers.

An explorer is a VBox with ``.refresh()`` and ``.summary`` (an HTML widget), so tests can drive it.
"""

from __future__ import annotations

import html
import io

import ipywidgets as widgets
import matplotlib.pyplot as plt


def explorer(controls: list, draw, title: str) -> widgets.VBox:
    """Lay out ``controls`` above a summary line and a figure; ``draw()`` returns (summary, figure|None)."""
    summary = widgets.HTML()
    output = widgets.Output()

    def refresh(*_):
        try:
            text, figure = draw()
        except ValueError as error:   # a bad combination: say what to change instead of a traceback
            text, figure = f"<b style='color:#b00'>{html.escape(str(error))}</b>", None
        summary.value = text
        output.clear_output(wait=True)
        if figure is not None:
            with output:
                from IPython.display import display
                display(figure)
            plt.close(getattr(figure, "figure", figure))
        box.last_figure = figure

    for control in controls:
        control.observe(refresh, names="value")
    rows = [controls[i:i + 3] for i in range(0, len(controls), 3)]
    box = widgets.VBox([widgets.HTML(f"<b>{html.escape(title)}</b>"),
                        *[widgets.HBox(row) for row in rows], summary, output])
    box.refresh, box.summary, box.controls = refresh, summary, {c.description: c for c in controls}
    refresh()
    return box


class RenderedFigure:
    """A figure drawn to PNG once: the Output shows the bytes without rendering again (``.figure``: it)."""

    def __init__(self, figure, dpi: int = 72):
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})  # speed over size
        self.figure, self.png = figure, buffer.getvalue()

    def _repr_png_(self) -> bytes:
        return self.png


def choice(description: str, options, value=None) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, value=value if value is not None else options[0],
                            description=description, style={"description_width": "initial"})


def slider(description: str, options, value) -> widgets.SelectionSlider:
    return widgets.SelectionSlider(options=options, value=value, description=description,
                                   continuous_update=False, style={"description_width": "initial"})
