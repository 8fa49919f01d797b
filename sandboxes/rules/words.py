"""Values in words, for people: one format for every duration, every time and
every size the console shows (pages, refusals, notifications alike)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

DASH = "—"
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def duration(value: timedelta | float | int | None) -> str:
    """One format for every duration: the two largest units, zero parts left
    out ("40 s", "5 min", "1 min 30 s", "2 h", "1 d 4 h"); under 10 s a
    fraction stays ("2.5 s")."""
    if value is None:
        return DASH
    seconds = abs(value.total_seconds() if isinstance(value, timedelta) else float(value))
    if seconds < 10 and not float(seconds).is_integer():
        return f"{seconds:.1f} s"
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    rest = round(seconds)
    parts: list[tuple[int, str]] = []
    for name, length in units:
        n, rest = divmod(rest, length)
        if n or parts:
            parts.append((n, name))
        if len(parts) == 2:
            break
    words = [f"{n} {name}" for n, name in parts if n]
    return " ".join(words) or "0 s"


def absolute(moment: datetime) -> str:
    """The absolute time in UTC, to the second: "2026-12-02 00:28:20 UTC"."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def relative(moment: datetime, now: datetime) -> str:
    """ "20 s ago", "in 40 s", or "now" within a second."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = (moment - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    text = duration(round(abs(delta)))
    return f"in {text}" if delta > 0 else f"{text} ago"


def size(n_bytes: float | int | None) -> str:
    """Bytes for people, in binary units: "12 KiB", "2.4 GiB"; unknown as "unknown"."""
    if n_bytes is None:
        return "unknown"
    value = float(n_bytes)
    for unit in BINARY_UNITS:
        if abs(value) < 1024 or unit == BINARY_UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{int(value)} B"
    return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}".replace(".0 ", " ")


def size_gib(gib: float | None) -> str:
    """A provider-reported size in GiB, for people (`size`)."""
    return "unknown" if gib is None else size(float(gib) * 2**30)
