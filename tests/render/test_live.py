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
