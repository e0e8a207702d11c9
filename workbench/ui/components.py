"""Number inputs that read what the API may send. Gradio's Number and Slider round the value before the handler
runs, so text, inf or nan posted to an endpoint ("1 OR 1=1" as a run id) failed inside Gradio with a logged
traceback (issue 30, item 19). `lenient` makes such a component hand a value it cannot read to the handler as it
came; the handler refuses it by name in one line (workbench.ui.shared.run_id_of, core.params). The component
itself is Gradio's (a subclass would make Gradio write a .pyi stub beside this file at import)."""

from __future__ import annotations

from typing import TypeVar

import gradio as gr

NumberLike = TypeVar("NumberLike", gr.Number, gr.Slider)


def lenient(component: NumberLike) -> NumberLike:
    strict = component.preprocess

    def preprocess(payload):
        try:
            return strict(payload)
        except (TypeError, ValueError, OverflowError):
            return payload

    component.preprocess = preprocess
    return component
