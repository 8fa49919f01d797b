"""Per-table `updated_at` cursors, kept in a small JSON file.

A file rather than a table: the cursor is an optimisation, not a record.
Losing it only makes the next run re-read every row, which is idempotent.
Cursors are keyed by (console database, source database), so pointing the
console at another Paperclip, or another console database at the same one,
starts from scratch.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import connection


def console_identity() -> str:
    db = connection.settings_dict
    return f"{db.get('HOST') or 'local'}:{db.get('PORT') or ''}/{db.get('NAME')}"


class CursorStore:
    def __init__(self, source: str, path: Path | None = None):
        self.path = Path(path or settings.MIRROR_CURSOR_FILE)
        self.key = f"{console_identity()} <- {source}"

    def _read_all(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # A damaged file costs one full re-read, never a stopped mirror.
            return {}

    def load(self) -> dict[str, datetime]:
        entry = self._read_all().get(self.key, {})
        out = {}
        for table, value in entry.items():
            try:
                out[table] = datetime.fromisoformat(value)
            except (TypeError, ValueError):
                continue
        return out

    def save(self, cursors: dict[str, datetime]) -> None:
        everything = self._read_all()
        everything[self.key] = {table: at.isoformat() for table, at in cursors.items()}
        self._write_all(everything)

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
