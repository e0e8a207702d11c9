"""Number inputs that read what the API may send. Gradio's own Number and Slider round the value before the handler
runs, so text, inf or nan posted to an endpoint ("1 OR 1=1" as a run id) failed inside Gradio with a logged
traceback (issue 30, item 19). These hand a value they cannot read to the handler as it came; the handler refuses it
by name in one line (workbench.ui.shared.run_id_of, core.params). They draw as Gradio's own (`is_template`)."""
from __future__ import annotations

import gradio as gr


class LenientNumber(gr.Number):
    is_template = True  # the page draws Gradio's number box

    def preprocess(self, payload):
        try:
            return super().preprocess(payload)
        except (TypeError, ValueError, OverflowError):
            return payload


class LenientSlider(gr.Slider):
    is_template = True  # the page draws Gradio's slider

    def preprocess(self, payload):
        try:
            return super().preprocess(payload)
        except (TypeError, ValueError, OverflowError):
            return payload
