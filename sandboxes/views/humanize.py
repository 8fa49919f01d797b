"""How the console shows values to a person: times, durations, sizes, and an
audit row's before → after.

Every time is one `<time>` element (`time_element`): its ISO datetime, the
absolute UTC time as its title, and a relative text ("20 s ago", "in 40 s");
every duration - retention, notice, backoff, a pass's length - is one
format (`duration`: "40 s", "5 min", "2 h", "1 d 4 h"); sizes are binary
units ("2.4 GiB", `size`).

The stored audit rows keep their raw JSON (the exports hand it on untouched); this is
only the reading: durations with their unit, yes/no for booleans, hold and
stage names in words, times without microseconds. A key present only on one
side is context (what the row was about), not a change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html

from sandboxes.explain import hold_phrase, short
from sandboxes.rules.words import DASH, absolute, duration, relative, size, size_gib

# The words themselves are the ground floor's (pages, actions and refusals share them).
__all__ = [
    "DASH",
    "Change",
    "absolute",
    "change_rows",
    "duration",
    "hold_phrase",
    "relative",
    "short",
    "shown",
    "size",
    "size_gib",
    "time_element",
]


def _label(value) -> str:
    return str(value).replace("_", " ")


def _key_label(key: str) -> str:
    """A key in words; a duration's unit is in its value ("warm retention: 1 d")."""
    for unit in ("_hours", "_seconds"):
        if key.endswith(unit):
            key = key[: -len(unit)]
    return _label(key)


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _time(value) -> str | None:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) >= 19 and value[4:5] == "-" and "T" in value:
        moment = parse_datetime(value)
    else:
        return None
    if moment is None:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.utc)
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


# --- times, durations and sizes ----------------------------------------------------


def time_element(moment, now: datetime | None = None, *, text: str = "") -> str:
    """The one way a time is shown: `<time datetime="ISO" title="absolute UTC">`
    around the relative text (or `text`, when the page words it itself)."""
    if isinstance(moment, str):
        moment = parse_datetime(moment)
    if not isinstance(moment, datetime):
        return DASH
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.astimezone(UTC).isoformat(),
        absolute(moment),
        text or relative(moment, now or timezone.now()),
    )


def shown(value, key: str = "") -> str:
    """One value in words. Nothing is "—"; 0 and False are values."""
    if value is None or value == "" or value == [] or value == {}:
        return "none" if key == "holds" else DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if key.endswith("_hours"):
            return duration(float(value) * 3600)
        if key.endswith("_seconds"):
            return duration(value)
        return _number(value)
    when = _time(value)
    if when is not None:
        return when
    if isinstance(value, list):
        return ", ".join(shown(v, key) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{_label(k)} {shown(v, k)}" for k, v in value.items())
    text = str(value)
    if key in WORDY_KEYS:
        return _label(text)
    return text


# Keys whose values are identifiers of a closed set: shown in words.
WORDY_KEYS = {
    "stage",
    "kind",
    "holds",
    "retirement_mode",
    "disposition",
    "lease_status",
    "status",
    "scope",
}


@dataclass(frozen=True)
class Change:
    key: str
    label: str
    old: str
    new: str
    changed: bool  # False: context (the key is on one side only, or unchanged)


def change_rows(before: dict | None, after: dict | None) -> list[Change]:
    """Rows to show for an audit row: changed keys first, in `after`'s order, then
    context (keys on one side only). Keys whose value did not move are left out."""
    before, after = before or {}, after or {}
    changed, context = [], []
    for key, new in after.items():
        if key in before:
            old = before[key]
            if old != new:
                changed.append(Change(key, _key_label(key), shown(old, key), shown(new, key), True))
        else:
            context.append(Change(key, _key_label(key), "", shown(new, key), False))
    for key, old in before.items():
        if key not in after:
            context.append(Change(key, _key_label(key), shown(old, key), "", False))
    return changed + context


# --- holds in plain words (docs/rules.md, holds): one copy, sandboxes/explain.py ----------

__all__ = ["change_rows", "hold_phrase", "short", "shown"]
