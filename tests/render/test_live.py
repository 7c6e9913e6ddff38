"""The live explorer on a feed it is handed (no TensorFlow): it follows the newest step, holds a window, reads
only what is new, says when the block ended, and its thread ends with the block."""

from __future__ import annotations

import time

import pytest

import vizdist
from vizdist.render.live import LiveExplorer


class Feed:
    """A block that has run ``steps`` steps: step ``s`` gave replica ``r`` the element ``10 * s + r``."""

    def __init__(self) -> None:
        self.steps, self.ended, self.asked = 0, False, []

    def __call__(self, after: int, max_steps: int):
        self.asked.append((after, max_steps))
        status = {"steps": self.steps, "ended": self.ended, "error": None}
        new = list(range(max(after + 1, self.steps - max_steps), self.steps))
        if not new:
            return None, status
        t = vizdist.Trace.from_records(
            batches=[dict(step=s, replica=r, n_elements=1, device=f"CPU:{r}") for s in new for r in range(2)],
            elements=[dict(step=s, replica=r, source_id=10 * s + r, position=0) for s in new for r in range(2)])
        return t, status


def test_it_shows_the_newest_step_and_keeps_a_window():
    feed = Feed()
    live = LiveExplorer(feed, window=3, start=False)
    assert not live.refresh() and live.step == -1
    feed.steps = 5
    live.refresh()
    assert live.step == 4 and (live.slider.min, live.slider.max) == (2, 4)  # the newest 3 steps
    assert "40" in live.cards.children[0].value and "41" in live.cards.children[1].value
    feed.steps, feed.ended = 7, True
    assert live.refresh()
    assert feed.asked[-1] == (4, 3)  # it asks only for what is new
    assert live.step == 6 and 'data-ended="1"' in live.status.value and "after 7 steps" in live.status.value
    live.slider.value = 5  # once the block ended, the slider browses the window
    assert 'data-step="5"' in live.label.value and "50" in live.cards.children[0].value


class RowsFeed(Feed):
    """The same block, handing its steps as plain rows (what ``rec.show()`` follows) instead of a trace; replica
    1 got nothing at odd steps, replica 2 has no batch at step 3, and the steps carry their phase and epoch."""

    def __init__(self, *, rows: bool) -> None:
        super().__init__()
        self.rows = rows

    def __call__(self, after: int, max_steps: int):
        new = list(range(max(after + 1, self.steps - max_steps), self.steps))
        status = {"steps": self.steps, "ended": self.ended, "error": None}
        batches = [dict(step=s, replica=r, n_elements=0 if r == 1 and s % 2 else 2, device=f"/device:CPU:{r}",
                        phase="train", epoch=s // 2, epoch_step=s % 2, dataset=0)
                   for s in new for r in range(3) if (s, r) != (3, 2)]
        ids = [[100 * b["step"] + 10 * b["replica"] + k for k in range(b["n_elements"])] for b in batches]
        if not batches:
            return None, status
        if self.rows:
            cols = {k: [b[k] for b in batches] for k in ("step", "replica", "device", "n_elements", "phase", "epoch",
                                                         "epoch_step")}
            return dict(cols, ids=ids), status
        elements = [dict(step=b["step"], replica=b["replica"], source_id=i, position=k)
                    for b, got in zip(batches, ids, strict=True) for k, i in enumerate(got)]
        return vizdist.Trace.from_records(batches=[dict(b, empty=b["n_elements"] == 0) for b in batches],
                                          elements=elements, meta={"api": "record"}), status


def test_plain_rows_are_shown_as_their_trace_is():
    shown = {}
    for rows in (True, False):
        feed, seen = RowsFeed(rows=rows), []
        live = LiveExplorer(feed, window=3, start=False)
        for feed.steps in (2, 5):
            live.refresh()
            for s in range(live.slider.min, live.slider.max + 1):
                live.slider.value = s
                seen.append((live.label.value, [c.value for c in live.cards.children]))
        shown[rows] = seen
    assert shown[True] == shown[False]
    label, cards = shown[True][-2]  # step 3: replica 1 got an empty batch, replica 2 no batch
    assert "train epoch 1 · 1" in label and all("empty" in c for c in cards[1:]) and "301" in cards[0]


def test_its_thread_follows_and_ends_with_the_block():
    feed = Feed()
    live = LiveExplorer(feed, interval=0.02)
    feed.steps = 3
    deadline = time.monotonic() + 10
    while live.step != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert live.step == 2
    feed.ended = True
    live._thread.join(timeout=10)
    assert not live._thread.is_alive()


def test_bad_knobs_are_refused():
    with pytest.raises(ValueError, match="interval"):
        LiveExplorer(Feed(), interval=0, start=False)
