"""When a kept sandbox goes next, in words: the one countdown (or wait) a record's
row and page show, and how urgent it is (docs/rules.md, what happens next).

Pure: the caller passes the moments it already loaded. Urgency is a word as
well as a colour (the CSS class), so it is read, not only seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .codes import HoldCode, Stage
from .words import duration

SOON = timedelta(hours=24)  # amber under a day
NOW = timedelta(hours=1)  # red under an hour
URGENCY_WORDS = {"soon": "under a day", "now": "under an hour"}


@dataclass(frozen=True)
class Countdown:
    text: str  # "retention ends in 5 h", "awaiting approval for 2 d"
    at: datetime  # the moment it counts to (or, for a wait, from)
    urgency: str = ""  # "", "soon" or "now": a countdown's, never a wait's

    @property
    def urgency_words(self) -> str:
        return URGENCY_WORDS.get(self.urgency, "")


def span(delta: timedelta) -> str:
    """A duration left or waited, in the console's one format (`words.duration`:
    "45 s", "4 min 59 s", "1 d 4 h"); a moment passed reads "0 s"."""
    return duration(max(delta, timedelta(0)))


def _urgency(left: timedelta) -> str:
    if left < NOW:
        return "now"
    if left < SOON:
        return "soon"
    return ""


def _until(text: str, at: datetime, now: datetime, passed: str) -> Countdown:
    left = at - now
    if left <= timedelta(0):
        return Countdown(passed, at, "now")
    return Countdown(f"{text} in {span(left)}", at, _urgency(left))


def countdown(
    *,
    stage: str,
    holds: list[str],
    now: datetime,
    retire_after: datetime | None = None,
    next_attempt_at: datetime | None = None,
    awaiting_since: datetime | None = None,
    hold_until: datetime | None = None,
    retention_ends: datetime | None = None,
    window_opens: datetime | None = None,
) -> Countdown | None:
    """The first that applies: a notice running, a failed step's next attempt,
    the wait for approval, an operator hold's end, the retention's end, the
    retirement window's opening."""
    if stage == Stage.NOTICED and retire_after is not None:
        return _until(
            "retires after the notice,", retire_after, now, "notice over: retires on the next pass"
        )
    if stage == Stage.FAILED and next_attempt_at is not None:
        return _until("next attempt", next_attempt_at, now, "next attempt on the next pass")
    if stage == Stage.AWAITING_APPROVAL and awaiting_since is not None:
        return Countdown(f"awaiting approval for {span(now - awaiting_since)}", awaiting_since)
    if HoldCode.OPERATOR_HOLD in holds and hold_until is not None:
        return _until("hold ends", hold_until, now, "hold ended: released on the next pass")
    if HoldCode.RETENTION in holds and retention_ends is not None:
        return _until(
            "retention ends", retention_ends, now, "retention over: judged on the next pass"
        )
    if HoldCode.OUTSIDE_WINDOW in holds and window_opens is not None:
        return _until(
            "retirement window opens", window_opens, now, "window open: judged on the next pass"
        )
    return None
