"""The retirement window: the hours an environment lets the console destroy
sandboxes and send owners their notices, in its own time zone (docs/rules.md,
the retirement window). Pure: plain values and the standard library's zoneinfo.

A window is a set of days of the week, a start and an end in local wall-clock
time, and an IANA time zone. On each listed day it opens at `start` and closes
at `end`; an end at or before the start closes the next day (22:00–06:00 spans
midnight, and an end equal to the start keeps it open 24 hours). The days are
the days a window opens: Fri 22:00–06:00 is open early on Saturday.

Wall-clock times are turned into instants with zoneinfo's first reading
(`fold=0`): a start inside a spring-forward gap opens when the clock has
jumped past it, and a start the fall-back repeats opens at the first one.
`is_open`, `next_opening` and `next_change` all judge the same instants, so
they agree across DST changes and the week's wrap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# The stored days (Environment.window_days): "" or day names, comma-separated
# ("mon,tue,wed,thu,fri"); the database checks it with this pattern.
_DAY = "(" + "|".join(DAYS) + ")"
STORED_DAYS_PATTERN = rf"^({_DAY}(,{_DAY})*)?$"
# How far a search looks: every listed day recurs within a week; two weeks
# step over a day whose window a DST change leaves empty.
_SEARCH_DAYS = 16


class WindowError(ValueError):
    """A window that cannot be: the message names the field ("time_zone: …")."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


@lru_cache(maxsize=256)
def zone(key: str) -> ZoneInfo:
    """The IANA time zone `key`; WindowError naming `time_zone` if there is none."""
    if key not in _known_zones():
        raise WindowError("time_zone", f"unknown time zone {key!r}")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError("time_zone", f"unknown time zone {key!r}") from None


@dataclass(frozen=True)
class Window:
    """When destroys and owner notices may happen: `days` (0 = Monday … 6 =
    Sunday, Python's weekday), opening at `start` and closing at `end`, local
    time in `time_zone`."""

    time_zone: str
    days: frozenset[int]
    start: time
    end: time

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.time_zone)

    def span(self, day: date) -> tuple[datetime, datetime] | None:
        """The instants (UTC) the window opening on `day` opens and closes, or
        None if it does not open that day (or a DST change leaves it empty)."""
        if day.weekday() not in self.days:
            return None
        closes_on = day if self.end > self.start else day + timedelta(days=1)
        opens = datetime.combine(day, self.start, self.zone).astimezone(UTC)
        closes = datetime.combine(closes_on, self.end, self.zone).astimezone(UTC)
        return (opens, closes) if closes > opens else None

    def spans(self, now: datetime, *, back: int = 2, ahead: int = _SEARCH_DAYS) -> Iterator:
        """The spans of the days around `now`'s local date, in order."""
        today = now.astimezone(self.zone).date()
        for offset in range(-back, ahead):
            s = self.span(today + timedelta(days=offset))
            if s is not None:
                yield s

    def is_open(self, now: datetime) -> bool:
        # A span opens on its local day and closes at most a day and an hour
        # later: only the spans of yesterday and today can hold `now`.
        return any(opens <= now < closes for opens, closes in self.spans(now, ahead=1))

    def next_opening(self, now: datetime) -> datetime:
        """`now` while the window is open, else the moment it next opens."""
        if self.is_open(now):
            return now
        return min(opens for opens, _ in self.spans(now) if opens > now)

    def next_change(self, now: datetime) -> datetime:
        """The first moment after `now` at which the window opens or closes (a
        listing judged at `now` is stale from then on)."""
        return min(t for s in self.spans(now) for t in s if t > now)

    def local(self, moment: datetime) -> datetime:
        return moment.astimezone(self.zone)

    def opens_words(self, now: datetime) -> str:
        """When it next opens, in its own time zone: "Mon 09:00"."""
        return f"{self.local(self.next_opening(now)):%a %H:%M}"

    def describe(self) -> str:
        """ "Mon–Fri 09:00–17:00 Europe/Berlin"."""
        return f"{days_words(self.days)} {self.start:%H:%M}–{self.end:%H:%M} {self.time_zone}"


def days_words(days: Iterable[int]) -> str:
    """ "Mon–Fri", "Mon, Wed, Fri", "Sat–Sun", every day as "Mon–Sun"."""
    chosen = sorted(set(days))
    runs: list[list[int]] = []
    for d in chosen:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    words = []
    for run in runs:
        first, last = DAYS[run[0]].capitalize(), DAYS[run[-1]].capitalize()
        if len(run) == 1:
            words.append(first)
        elif len(run) == 2:
            words.append(f"{first}, {last}")
        else:
            words.append(f"{first}–{last}")
    return ", ".join(words)


def parse_days(value: str | Iterable[str]) -> frozenset[int]:
    """Days as stored ("mon,tue") or given (["mon", "tue"]); WindowError naming
    `window_days` for a name that is not a day."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out = set()
    for name in names:
        name = name.strip().lower()
        if not name:
            continue
        if name not in DAYS:
            raise WindowError("window_days", f"{name!r} is not a day (mon … sun)")
        out.add(DAYS.index(name))
    return frozenset(out)


def stored_days(days: Iterable[int]) -> str:
    """Days as the environment stores them: "mon,tue,wed,thu,fri"."""
    return ",".join(DAYS[d] for d in sorted(set(days)))


def window_from(
    time_zone: str, days: str | Iterable[str], start: time | None, end: time | None
) -> Window | None:
    """The window these settings describe; None when all are empty (any time).
    A window is given whole: a missing part, an unknown time zone or a day that
    is not one raises WindowError naming the field."""
    time_zone = (time_zone or "").strip()
    chosen = parse_days(days or "")
    if not time_zone and not chosen and start is None and end is None:
        return None
    missing = [
        name
        for name, value in (
            ("time_zone", time_zone),
            ("window_days", chosen),
            ("window_start", start),
            ("window_end", end),
        )
        if not value
    ]
    if missing:
        raise WindowError(
            missing[0],
            "a retirement window needs a time zone, its days, a start and an end "
            "(leave all four empty for any time)",
        )
    assert start is not None and end is not None
    zone(time_zone)
    return Window(time_zone, chosen, _minute(start), _minute(end))


def _minute(t: time) -> time:
    """A window counts in whole minutes, without a time zone of its own."""
    return t.replace(second=0, microsecond=0, tzinfo=None)


@lru_cache(maxsize=1024)
def stored_window(time_zone: str, days: str, start: time | None, end: time | None) -> Window | None:
    """The window of an environment's stored fields (validated when they were
    saved); None for any time, or if they no longer make a window (a time
    zone the system lost): a window that cannot be judged limits nothing."""
    try:
        return window_from(time_zone, days, start, end)
    except WindowError:
        return None
