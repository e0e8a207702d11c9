"""Plotly figures, one module per tab that draws them; pure functions of traces and plain data (no Gradio).

common.py     colours, the blank figure, run labels, unvalidated figures for per-step redraws
compare.py    the Compare tab's tokens/s per method with its 95 % intervals
replay.py     a step's draft tree and thresholds (server side), a run's acceptance per draft position
analytics.py  tokens per step, acceptance by depth and source, MAL and tokens/s, MAL against a parameter
report.py     the report command's δ sweep curves
"""
