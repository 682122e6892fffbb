"""Controls a mouse can set: sliders whose track gives every value room enough to be picked.

    from course_lib.widgets.controls import slider_size, wide_slider
    m = wide_slider(8, 1, 32, "m (micro-batches)")                 # 32 values, 10 px apart
    route = FloatSlider(min=1, max=3, step=0.1, **slider_size(21))  # any slider: pass the value count

An ipywidgets slider is about 300 px wide whatever its range, so 32 values sit 9 px apart and 64 sit
4 px apart: the mouse cannot pick one. These set the layout width from the number of values.

``Shown`` is what every lesson widget says in a saved notebook before its cell has run (the widget's
plain-text stand-in): one line naming it, instead of ipywidgets' ``VBox(children=(...))``. A saved
notebook keeps only that line (course_lib/widgets/stand_in.py).
"""

from __future__ import annotations

import ipywidgets as widgets

from course_lib.widgets.stand_in import stand_in_text

SLIDER_PX_PER_VALUE = 10  # a mouse picks values about this far apart on a slider's track
DESCRIPTION_PX = 150  # the width of every slider's description ("m (micro-batches)")
READOUT_PX = 60  # the number shown right of the track, with its margins
# a widget's <pre> text may wrap in a narrow page, but only between words: never "per d|evice", "5.1 M|iB"
WRAP_AT_SPACES = "white-space:pre-wrap; word-break:normal; overflow-wrap:normal"


def slider_size(n_values: int) -> dict:
    """Style and layout that give a slider's track SLIDER_PX_PER_VALUE pixels per value (at least
    240 px); pass them to any ipywidgets slider: ``IntSlider(..., **slider_size(32))``."""
    track = max(240, SLIDER_PX_PER_VALUE * n_values)
    return {
        "style": {"description_width": f"{DESCRIPTION_PX}px"},
        "layout": widgets.Layout(width=f"{DESCRIPTION_PX + track + READOUT_PX}px"),
    }


def wide_slider(value: int, lowest: int, highest: int, description: str) -> widgets.IntSlider:
    """An IntSlider from `lowest` to `highest` that a mouse can set to each value (slider_size)."""
    return widgets.IntSlider(
        value=value, min=lowest, max=highest, description=description, continuous_update=False,
        **slider_size(highest - lowest + 1),
    )  # fmt: skip


class Shown:
    """Mix into a lesson widget (before the ipywidgets class) and set `what`: a saved notebook shows
    "[<what>: run this cell to use it]" where the live widget will be."""

    what = "widget"

    def __repr__(self) -> str:
        return stand_in_text(self.what)
