"""The Gradio workbench: `python app.py` (the Hugging Face Spaces entry point) or `python -m workbench serve`.

Compare, Replay & tune (with live re-scoring), Diff, CSD memory, Analytics and Export: one module per tab, built by
builder.build_app. Session state is only run ids; everything else is read from the store. Handlers
catch the project's errors and show them in a status line, so bad input never stops the app.

    builder.py        build_app, launch
    compare_tab.py    methods side by side on one prompt
    replay_tab.py     step through a stored run; re-score or re-run it (components and events)
    replay_js.py      the browser-side step switch: draws a step from data sent once per run
    diff_tab.py       two stored runs aligned token by token, the first divergence stated
    replay_view.py    what the replay shows, as pure functions of a run and a step
    memory_tab.py     the correction memory a CSD run read: entries, counts, rescues
    analytics_tab.py  figures over stored runs
    export_tab.py     CSV zip of stored runs
    shared.py         run cache, run lists, labels and the metrics line
"""

from workbench.ui.builder import CSS, build_app, launch

__all__ = ["CSS", "build_app", "launch"]
