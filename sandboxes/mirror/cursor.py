"""Where the mirror stopped, kept in a small JSON file: per table the newest
`updated_at` written (the cursor), the source snapshot of the last complete
iteration, and a digest of each row the next iteration will read again
behind the cursor (docs/architecture.md, a mirror iteration when little changed).

A file rather than a table: the position is an optimisation, not a record.
Losing it only makes the next run re-read and re-write every row, which is
idempotent. Positions are keyed by (console database, source database), so
pointing the console at another Paperclip, or another console database at the
same one, starts from scratch.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from django.db import connection

# How often a long iteration saves where it is.
CHECKPOINT_SECONDS = 10.0


def console_identity() -> str:
    db = connection.settings_dict
    return f"{db.get('HOST') or 'local'}:{db.get('PORT') or ''}/{db.get('NAME')}"


def row_digest(row: dict[str, Any]) -> str:
    """A digest of a source row's columns and values as read: equal digests,
    the same row (writing it again would change nothing)."""
    try:
        data = orjson.dumps(row, default=str)
    except TypeError:  # an integer beyond 64 bits in a jsonb document, say
        data = repr(sorted(row.items(), key=lambda item: item[0])).encode()
    return hashlib.blake2b(data, digest_size=12).hexdigest()


@dataclass
class Position:
    """What the last iterations left for the next one."""

    # Per table, the newest updated_at written.
    cursors: dict[str, datetime] = field(default_factory=dict)
    # The source's snapshot (`source.snapshot`) when the last complete
    # iteration read; None when the last one did not complete.
    snapshot: str | None = None
    # Per table, by primary key (as text), the digest of each row written at or
    # after its cursor less the overlap: the rows the next iteration reads again.
    seen: dict[str, dict[str, str]] = field(default_factory=dict)


class CursorStore:
    def __init__(self, source: str, path: Path | None = None):
        self.path = Path(path or settings.MIRROR_CURSOR_FILE)
        self.key = f"{console_identity()} <- {source}"
        self.saved_at = time.monotonic()

    def _read_all(self) -> dict:
        try:
            everything = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # A damaged file costs one full re-read, never a stopped mirror.
            return {}
        return everything if isinstance(everything, dict) else {}

    def load_position(self) -> Position:
        entry = self._read_all().get(self.key)
        if not isinstance(entry, dict):
            return Position()
        if not isinstance(entry.get("cursors"), dict):
            # The first format: the cursors alone, {table: time}.
            return Position(cursors=_times(entry))
        snapshot, seen = entry.get("snapshot"), entry.get("seen")
        return Position(
            cursors=_times(entry["cursors"]),
            snapshot=snapshot if isinstance(snapshot, str) else None,
            seen={
                table: {str(pk): d for pk, d in rows.items() if isinstance(d, str)}
                for table, rows in (seen.items() if isinstance(seen, dict) else ())
                if isinstance(rows, dict)
            },
        )

    def checkpoint(self, position: Position) -> None:
        """Save, unless the last save was less than CHECKPOINT_SECONDS ago: a
        long iteration keeps what it did, a short one writes the file once at
        its end (`save_position`)."""
        if time.monotonic() - self.saved_at >= CHECKPOINT_SECONDS:
            self.save_position(position)

    def save_position(self, position: Position) -> None:
        everything = self._read_all()
        everything[self.key] = {
            "cursors": {table: at.isoformat() for table, at in position.cursors.items()},
            "snapshot": position.snapshot,
            "seen": position.seen,
        }
        self._write_all(everything)
        self.saved_at = time.monotonic()

    def reset(self) -> None:
        everything = self._read_all()
        if everything.pop(self.key, None) is not None:
            self._write_all(everything)

    def _write_all(self, everything: dict) -> None:
        # Write-then-rename: a crash never leaves a half-written file.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".mirror-cursors-")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(everything, fh, indent=2, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _times(entry: dict) -> dict[str, datetime]:
    out = {}
    for table, value in entry.items():
        try:
            out[table] = datetime.fromisoformat(value)
        except (TypeError, ValueError):
            continue
    return out


# Rows noted per table at most: past it, the oldest of the window are written
# again next time (idempotent). 1,000 rows a table keep the file under 1 MB
# (5,000 made it 4 MB, 0.1 s to write).
WINDOW_ROWS = 1000


class Window:
    """One table's rows the next iteration reads again: those at or after the
    newest updated_at less the overlap. Rows are read in updated_at order, so
    only a page's tail can be in it."""

    def __init__(self, pk: str, overlap: timedelta, before: dict[str, str]):
        self.pk, self.overlap, self.before = pk, overlap, before
        self.rows: deque[tuple[datetime, str, str]] = deque(maxlen=WINDOW_ROWS)

    def split(self, page: list[dict]) -> tuple[list[dict], list[tuple[datetime, str, str]]]:
        """The page's rows that differ from what the last iteration wrote, and
        what to note of the page once those are written (`note`)."""
        before, pk = self.before, self.pk
        last = page[-1]["updated_at"]
        edge = last - self.overlap if isinstance(last, datetime) else None
        fresh: list[dict] = []
        notes: list[tuple[datetime, str, str]] = []
        for row in page:
            at, key, digest = row["updated_at"], "", ""
            if before:
                key = str(row[pk])
                if key in before:
                    digest = row_digest(row)
                    if digest == before[key]:
                        if isinstance(at, datetime):
                            notes.append((at, key, digest))  # still in the window, the same
                        continue
            fresh.append(row)
            if edge is not None and isinstance(at, datetime) and at >= edge:
                notes.append((at, key or str(row[pk]), digest or row_digest(row)))
        return fresh, notes

    def note(self, notes: list[tuple[datetime, str, str]]) -> None:
        self.rows.extend(notes)

    def reach(self, newest: datetime | None) -> Reach:
        return Reach(newest, list(self.rows))


@dataclass
class Reach:
    """How far one reader went through a table in an iteration (one process,
    or one process's share of the rows): the newest updated_at it read (None
    when it read no row) and the rows it noted in the window (`Window`)."""

    newest: datetime | None
    noted: list[tuple[datetime, str, str]] = field(default_factory=list)


def reached(
    before: dict[str, str], overlap: timedelta, reaches: list[Reach]
) -> tuple[datetime | None, dict[str, str]]:
    """Where a table's readers leave it: the newest updated_at any of them
    read, and the rows the next iteration, reading from it less the overlap,
    reads again (the newest WINDOW_ROWS noted). When none read a row, None
    and the rows `before` (the last iteration's)."""
    times = [r.newest for r in reaches if r.newest is not None]
    if not times:
        return None, dict(before)
    newest = max(times)
    edge = newest - overlap
    noted = sorted((n for r in reaches for n in r.noted), key=lambda n: n[0])[-WINDOW_ROWS:]
    return newest, {key: digest for at, key, digest in noted if at >= edge}
