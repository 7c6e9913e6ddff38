"""Predict, then reveal: the learner types a guess, then the real run answers beside it.

A :class:`Predict` widget asks one question about a run (how many elements each replica gets at
each step, which worker reads which file, how many times an element arrives), shows a grid of
boxes to type the guess into, and a button that runs the real pipeline and shows the answer next
to the guess, marking every difference. It never touches TensorFlow: the notebook hands it the run,
either as a function that records a :class:`~vizdist.trace.Trace` (called when the learner asks
for the answer) or as a trace recorded earlier.

Where no live widget can render (GitHub, nbval), its static view shows the question and the real
answer.

Example:
    >>> from vizdist.trace import Trace
    >>> t = Trace.from_records(batches=[dict(step=0, replica=r, n_elements=2 - r) for r in range(2)])
    >>> p = predict_split(t, steps=1, replicas=2, question="How many elements per replica?")
    >>> p.guess_cell("step 0", "replica 0").value = "2"
    >>> p.guess_cell("step 0", "replica 1").value = "2"
    >>> print(p.reveal().summary)
    1 of 2 right. At step 0, replica 1: you said 2, the run gave 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from vizdist._clip import clip
from vizdist._optional import require
from vizdist.trace import Trace
from vizdist.trace_diff import unfinished_run

__all__ = ["Predict", "Reveal", "arrivals", "elements_per_replica", "predict_arrivals", "predict_files",
           "predict_split", "workers_per_file"]

if TYPE_CHECKING:  # mypy reads the base classes from the package itself
    import ipywidgets as widgets
else:
    widgets = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")

Run = Callable[[], Trace] | Trace
Answer = Callable[[Trace], pd.DataFrame]
_RIGHT, _WRONG = "#d9f2d9", "#f8d0d0"
_TD = "border:1px solid #ccc;padding:3px 8px;text-align:center;font-family:monospace"


# -- answers: what the real run says, as a table (rows x columns of plain values) -------------------
def elements_per_replica(trace: Trace) -> pd.DataFrame:
    """Steps × replicas: how many elements each replica got at each step.

    Example:
        >>> t = Trace.from_records(batches=[dict(step=0, replica=r, n_elements=r) for r in range(2)])
        >>> elements_per_replica(t).to_dict("index")
        {'step 0': {'replica 0': 0, 'replica 1': 1}}
    """
    b = trace.batches
    table = b.pivot_table(index="step", columns="replica", values="n_elements", aggfunc="sum", fill_value=0)
    table.index = [f"step {s}" for s in table.index]
    table.columns = [f"replica {r}" for r in table.columns]
    return table.astype("int64")


def workers_per_file(trace: Trace) -> pd.DataFrame:
    """Files × ``worker(s)``: which workers read each file (``"0"``, or ``"0, 1"`` when both did).

    Example:
        >>> t = Trace.from_records(elements=[dict(worker=w, source_file=f"/d/part-{w}.txt") for w in (0, 1)])
        >>> workers_per_file(t)["worker(s)"].tolist()
        ['0', '1']
    """
    e = trace.elements[trace.elements["source_file"] != ""]
    names = e["source_file"].map(lambda f: Path(str(f)).name)
    readers = e.groupby(names)["worker"].agg(lambda w: ", ".join(str(int(x)) for x in sorted(set(w))))
    return readers.to_frame("worker(s)").rename_axis(None)


def arrivals(element: int) -> Answer:
    """An answer: how many times source element ``element`` arrived (all workers, replicas, steps).

    Example:
        >>> t = Trace.from_records(elements=[dict(source_id=7, worker=w) for w in (0, 1)])
        >>> int(arrivals(7)(t).iloc[0, 0])
        2
    """
    def answer(trace: Trace) -> pd.DataFrame:
        n = int((trace.elements["source_id"] == element).sum())
        return pd.DataFrame({"arrivals": [n]}, index=[f"element {element}"])

    return answer


# -- comparing a guess with the answer -------------------------------------------------------------
def _norm(value: Any) -> tuple[Any, ...] | None:
    """A cell as a comparable tuple: ``"1, 0"`` and ``[0, 1]`` are both ``(0, 1)``; blank is None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    parts = [p for p in re.split(r"[,\s;/]+", str(value).strip().strip("[](){}")) if p]
    if not parts:
        return None
    try:
        return tuple(sorted(int(p) for p in parts))
    except ValueError:
        return tuple(sorted(p.lower() for p in parts))


@dataclass(frozen=True)
class Reveal:
    """A guess beside the real answer.

    Attributes:
        guess: what the learner typed (rows × columns of strings; ``""`` = left blank).
        answer: what the real run gave (the same rows and columns; ``None`` where the run has no
            such row, say a step that never happened).
        right: True per cell where the guess is the answer.
        differences: one sentence per wrong cell.
    """

    guess: pd.DataFrame
    answer: pd.DataFrame
    right: pd.DataFrame
    differences: list[str]

    @property
    def summary(self) -> str:
        """``"n of m right."`` and the first differences, in words."""
        n, total = int(self.right.to_numpy().sum()), self.right.size
        head = f"{n} of {total} right."
        if not self.differences:
            return head + " Your prediction is what TensorFlow did."
        more = len(self.differences) - 3
        return " ".join([head, *self.differences[:3]] + ([f"(and {more} more)"] if more > 0 else []))


def compare(guess: pd.DataFrame, answer: pd.DataFrame, *, describe: Callable[[str, str], str]) -> Reveal:
    """Put ``guess`` beside ``answer`` (aligned on their row and column labels).

    ``describe(row, column)`` names a cell in a sentence (``"At step 0, replica 1"``).

    Example:
        >>> g = pd.DataFrame({"n": ["1"]}, index=["a"])
        >>> compare(g, pd.DataFrame({"n": [2]}, index=["a"]), describe=lambda r, c: r).differences
        ['a: you said 1, the run gave 2.']
    """
    rows = list(guess.index) + [r for r in answer.index if r not in guess.index]
    cols = list(guess.columns) + [c for c in answer.columns if c not in guess.columns]
    g = guess.reindex(index=rows, columns=cols).fillna("").astype(str)
    a = answer.astype(object).reindex(index=rows, columns=cols)
    a = a.where(a.notna(), None)
    right = pd.DataFrame(False, index=rows, columns=cols)
    diffs = []
    for r in rows:
        for c in cols:
            mine, real = _norm(g.loc[r, c]), _norm(a.loc[r, c])
            right.loc[r, c] = mine == real
            if mine != real:
                said = "you left it blank" if mine is None else f"you said {g.loc[r, c].strip()}"
                gave = "the run has no such cell" if a.loc[r, c] is None else f"the run gave {_show(a.loc[r, c])}"
                diffs.append(f"{describe(str(r), str(c))}: {said}, {gave}.")
    return Reveal(g, a, right, diffs)


def _show(value: Any) -> str:
    return "—" if value is None else str(value)


# -- the widget ------------------------------------------------------------------------------------
class Predict(widgets.VBox):  # type: ignore[misc]
    """Ask, let the learner guess, then run for real and show the answer beside the guess.

    Build it with :func:`predict_split`, :func:`predict_files` or :func:`predict_arrivals` (or
    directly, with your own ``answer``). The trace of the last run is ``predict.trace``.

    Args:
        run: a function that runs the real pipeline and returns its trace (called each time the
            learner asks for the answer, and once for the static view), or a trace recorded earlier.
        question: the question, in the learner's words.
        answer: ``trace -> DataFrame`` of the real answer; its index and columns are the grid's.
        rows: row labels of the grid the learner fills in.
        columns: column labels of that grid.
        describe: ``(row, column) -> str`` naming a cell in a sentence.
    """

    def __init__(self, run: Run, *, question: str, answer: Answer, rows: Sequence[str], columns: Sequence[str],
                 describe: Callable[[str, str], str] | None = None) -> None:
        if not (isinstance(run, Trace) or callable(run)):
            raise TypeError(f"run must be a function returning a vizdist.Trace, or a Trace; got {type(run).__name__}.")
        if not rows or not columns:
            raise ValueError("a prediction needs at least one row and one column to fill in.")
        self._run, self._answer_of, self.question = run, answer, question
        self._describe = describe or (lambda r, c: f"{r}, {c}".capitalize() if r else c.capitalize())
        self.trace: Trace | None = run if isinstance(run, Trace) else None
        self.last: Reveal | None = None
        self._static: pd.DataFrame | None = None
        self._cells = {(r, c): widgets.Text(placeholder="?", layout=widgets.Layout(width="72px"))
                       for r in rows for c in columns}
        for box in self._cells.values():
            box.add_class("vizdist-predict-input")
        self.button = widgets.Button(description="Run it and reveal", button_style="primary",
                                     layout=widgets.Layout(width="auto"))
        self.button.add_class("vizdist-predict-reveal")
        self.button.on_click(lambda _: self._reveal_in_widget())
        self.result = widgets.HTML('<div data-revealed="0"><small>Type your prediction, then run.</small></div>')
        self.result.add_class("vizdist-predict-result")
        head = widgets.HTML(f"<b>Predict:</b> {escape(question)}")
        super().__init__([head, self._grid(list(rows), list(columns)), self.button, self.result])
        self.add_class("vizdist-predict")

    def _grid(self, rows: list[str], columns: list[str]) -> Any:
        label = lambda text: widgets.HTML(f"<small>{escape(text)}</small>")  # noqa: E731
        items = [label("")] + [label(c) for c in columns]
        for r in rows:
            items += [label(r)] + [self._cells[(r, c)] for c in columns]
        return widgets.GridBox(items, layout=widgets.Layout(
            grid_template_columns=f"max-content repeat({len(columns)}, 80px)", grid_gap="2px 4px"))

    # -- state -------------------------------------------------------------------------------------
    def guess_cell(self, row: str, column: str) -> Any:
        """The text box of one cell of the grid (set ``.value`` to type into it)."""
        return self._cells[(row, column)]

    @property
    def guess(self) -> pd.DataFrame:
        """What the learner typed, rows × columns of strings."""
        rows = list(dict.fromkeys(r for r, _ in self._cells))
        cols = list(dict.fromkeys(c for _, c in self._cells))
        return pd.DataFrame([[self._cells[(r, c)].value for c in cols] for r in rows], index=rows, columns=cols)

    def _real(self) -> Trace:
        trace = self._run() if callable(self._run) and not isinstance(self._run, Trace) else self._run
        if not isinstance(trace, Trace):
            raise TypeError(f"the run handed to Predict must return a vizdist.Trace; it returned "
                            f"{type(trace).__name__}.")
        unfinished = unfinished_run(trace)
        if unfinished:
            raise RuntimeError(f"the run did not finish: {unfinished}, so there is no answer to compare the "
                               "guess with. Run it again (with a longer timeout=, if it has one).")
        self.trace = trace
        return trace

    def reveal(self) -> Reveal:
        """Run the real pipeline (or take the trace given), compare it with the guess and show both."""
        answer = self._answer_of(self._real())
        self._static = answer
        self.last = compare(self.guess, answer, describe=self._describe)
        self.result.value = _reveal_html(self.last)
        return self.last

    def _reveal_in_widget(self) -> None:
        self.button.disabled = True
        self.result.value = '<div data-revealed="0"><small>Running TensorFlow…</small></div>'
        try:
            self.reveal()
        except Exception as exc:  # shown in the widget: a button click has nowhere else to raise to
            self.result.value = (f'<div data-revealed="0" style="color:#b00">The run failed: '
                                 f"{escape(type(exc).__name__)}: {escape(clip(exc, 4_000))}</div>")
        finally:
            self.button.disabled = False

    # -- static fallback ---------------------------------------------------------------------------
    def answer(self) -> pd.DataFrame:
        """The real answer (runs the pipeline once if it has not run yet)."""
        if self._static is None:
            self._static = self._answer_of(self.trace if self.trace is not None else self._real())
        return self._static

    def __repr__(self) -> str:
        return f"Predict: {self.question}\nThe real run:\n{self.answer().to_string()}"

    def static_html(self) -> str:
        """The question and the real answer, escaped (what GitHub shows)."""
        return (f'<div class="vizdist-predict-static"><p><b>Predict:</b> {escape(self.question)}</p>'
                f"<p><small>The real run (in JupyterLab you type your guess first):</small></p>"
                f"{self.answer().to_html(escape=True)}</div>")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = repr(self)
        data["text/html"] = self.static_html()
        return data


def _reveal_html(rev: Reveal) -> str:
    """The guess beside the answer, cell by cell, green where right and red where not."""
    head = "".join(f'<th style="{_TD}">{escape(str(c))}</th>' for c in rev.answer.columns)
    rows = []
    for r in rev.answer.index:
        tds = []
        for c in rev.answer.columns:
            ok = bool(rev.right.loc[r, c])
            mine = rev.guess.loc[r, c].strip() or "·"
            real = _show(rev.answer.loc[r, c])
            body = escape(real) if ok else f"<s>{escape(mine)}</s> → <b>{escape(real)}</b>"
            tds.append(f'<td style="{_TD};background:{_RIGHT if ok else _WRONG}" data-right="{int(ok)}">{body}</td>')
        rows.append(f'<tr><th style="{_TD}">{escape(str(r))}</th>{"".join(tds)}</tr>')
    n_wrong = int((~rev.right).to_numpy().sum())
    return (f'<div data-revealed="1" data-wrong="{n_wrong}"><p>{escape(rev.summary)}</p>'
            f'<table style="border-collapse:collapse"><tr><th style="{_TD}"></th>{head}</tr>{"".join(rows)}</table>'
            f"<p><small>Each cell: the real run; where you guessed otherwise, <s>your guess</s> → "
            f"<b>the run</b>.</small></p></div>")


# -- ready-made questions --------------------------------------------------------------------------
def predict_split(run: Run, *, steps: int, replicas: int, question: str | None = None) -> Predict:
    """Predict how many elements each replica gets at each step.

    Args:
        run: a function returning the trace of the real run (e.g. ``lambda:
            vizdist.trace_distribution(strategy, ds)``), or a trace.
        steps: rows of the grid (steps the learner fills in).
        replicas: columns of the grid.
        question: the question (default: a generic one).

    Example:
        >>> t = Trace.from_records(batches=[dict(step=0, replica=r, n_elements=1) for r in range(2)])
        >>> print(repr(predict_split(t, steps=1, replicas=2)).splitlines()[-1])
        step 0          1          1
    """
    return Predict(run, question=question or "How many elements does each replica get at each step?",
                   answer=elements_per_replica, rows=[f"step {s}" for s in range(steps)],
                   columns=[f"replica {r}" for r in range(replicas)],
                   describe=lambda r, c: f"At {r}, {c}")


def predict_files(run: Run, *, files: Sequence[str], question: str | None = None) -> Predict:
    """Predict which worker(s) read each file (type ``0``, or ``0, 1`` for both).

    Example:
        >>> t = Trace.from_records(elements=[dict(worker=0, source_file="/d/a.txt")])
        >>> predict_files(t, files=["/d/a.txt"]).answer()["worker(s)"].tolist()
        ['0']
    """
    names = [Path(str(f)).name for f in files]
    return Predict(run, question=question or "Which worker reads each file?", answer=workers_per_file,
                   rows=names, columns=["worker(s)"], describe=lambda r, c: f"{r}")


def predict_arrivals(run: Run, *, element: int, question: str | None = None) -> Predict:
    """Predict how many times source element ``element`` arrives.

    Example:
        >>> t = Trace.from_records(elements=[dict(source_id=7, worker=w) for w in (0, 1)])
        >>> int(predict_arrivals(t, element=7).answer().iloc[0, 0])
        2
    """
    return Predict(run, question=question or f"How many times does element {element} arrive?",
                   answer=arrivals(element), rows=[f"element {element}"], columns=["arrivals"],
                   describe=lambda r, c: f"{r.capitalize()}, {c}")
