"""Static HTML views (escaped) built from the split layout and the findings.

They are the fallback that GitHub and nbval see when a live widget cannot
render, and they are deterministic (no random ids) so nbval can compare them.
"""

from __future__ import annotations

from html import escape
from typing import Any

import pandas as pd

from vizdist._clip import clip

__all__ = ["cell_html", "findings_html", "split_html"]

_STYLE = (
    "border-collapse:collapse;font-family:monospace;font-size:12px"
)
_TD = "border:1px solid #ccc;padding:3px 6px;vertical-align:top"
_MARK = "background:#ffe08a;outline:2px solid #c80;"  # a cell that changed since the last run


def ids_text(labels: list[str], limit: int = 12) -> str:
    if len(labels) <= limit:
        return ", ".join(labels)
    return ", ".join(labels[:limit]) + f", … (+{len(labels) - limit})"


def cell_html(cell: dict[str, Any]) -> str:
    """One (step, replica) cell: its ids, or a marked empty batch."""
    if cell["empty"] or not cell["labels"]:
        return '<span style="color:#b00">empty</span>'
    text = escape(ids_text(cell["labels"]))
    if cell.get("partial"):
        text += ' <span style="color:#a60">(partial)</span>'
    return text


def split_html(layout: dict[str, Any], *, step: int | None = None, title: bool = True,
               marked: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset()) -> str:
    """A steps × replicas table; ``step`` highlights one row, ``marked`` (step, replica) cells.

    ``title=False`` leaves the layout's title out (for views that show it above the table).

    Example:
        >>> lay = {"title": "t", "steps": [0], "total_steps": 1,
        ...        "replicas": [{"id": 0, "device": "CPU:0", "worker": 0}],
        ...        "cells": [[{"labels": ["<b>"], "empty": False, "partial": False}]]}
        >>> "&lt;b&gt;" in split_html(lay)
        True
    """
    head = "".join(
        f'<th style="{_TD}">replica {r["id"]}<br><small>{escape(r["device"])}</small></th>'
        for r in layout["replicas"]
    )
    rows = []
    labels = layout.get("step_labels") or [""] * len(layout["steps"])
    for s, cells, label in zip(layout["steps"], layout["cells"], labels, strict=False):
        bg = "background:#fff3c4;" if step == s else ""
        name = f"step {s}" + (f"<br><small>{escape(label)}</small>" if label else "")
        tds = "".join(f'<td style="{_TD};{bg}{_MARK if (s, r["id"]) in marked else ""}"'
                      f'{" data-changed=1" if (s, r["id"]) in marked else ""}>{cell_html(c)}</td>'
                      for r, c in zip(layout["replicas"], cells, strict=False))
        rows.append(f'<tr><th style="{_TD};{bg}">{name}</th>{tds}</tr>')
    more = ""
    if layout["total_steps"] > len(layout["steps"]):
        more = f'<p><small>first {len(layout["steps"])} of {layout["total_steps"]} steps shown</small></p>'
    if layout.get("total_replicas", len(layout["replicas"])) > len(layout["replicas"]):
        more += (f'<p><small>first {len(layout["replicas"])} of {layout["total_replicas"]} replicas shown</small>'
                 '</p>')
    head_title = f"<b>{escape(layout['title'])}</b>" if title else ""
    return (
        f'<div class="vizdist-split">{head_title}'
        f'<table style="{_STYLE}"><tr><th style="{_TD}"></th>{head}</tr>{"".join(rows)}</table>{more}</div>'
    )


_SEVERITY_COLOR = {"error": "#b00", "warning": "#a60", "info": "#357"}
#: Findings an HTML list shows at most (the first ones, by step); a last item counts the rest.
MAX_FINDINGS = 200


def findings_html(findings: pd.DataFrame, *, step: int | None = None) -> str:
    """The findings as an escaped HTML list; ``step`` keeps global ones and that step's."""
    if step is not None and len(findings):
        findings = findings[(findings["step"] == step) | (findings["step"] < 0)]
    if findings.empty:
        return "<p><small>No findings" + (f" for step {step}" if step is not None else "") + ".</small></p>"
    items = []
    more = len(findings) - MAX_FINDINGS
    for row in findings.head(MAX_FINDINGS).itertuples(index=False):
        color = _SEVERITY_COLOR.get(row.severity, "#333")
        where = f" (step {row.step})" if row.step >= 0 else ""
        items.append(
            f'<li><b style="color:{color}">{escape(row.severity)}</b> '
            f"<code>{escape(row.code)}</code>{escape(where)}: {escape(clip(row.message, 2_000))}</li>"
        )
    if more > 0:
        items.append(f"<li><i>and {more:,} more findings (vizdist.diagnose(trace) lists them all)</i></li>")
    return '<ul style="font-size:12px;padding-left:18px">' + "".join(items) + "</ul>"
