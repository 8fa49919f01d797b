"""What one mirror iteration did: rows read and written per table, each row
skipped or quarantined, by reason, and the lease rows that name no sandbox
(docs/architecture.md, Mirror)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields


@dataclass
class Problem:
    table: str
    row_id: str
    reason: str
    action: str  # "skipped" or "quarantined"
    kind: str = ""  # groups like problems in the summary

    def __post_init__(self):
        self.kind = self.kind or self.reason


@dataclass
class TableCounts:
    read: int = 0
    applied: int = 0
    skipped: int = 0
    quarantined: int = 0
    # Read fine, but a lease with no provider_lease_id (a local or ssh lease):
    # neither mirrored nor skipped (translate.NotASandbox).
    not_sandbox: int = 0
    # Read again behind the cursor, unchanged since the last iteration wrote
    # them: counted in `read`, not written (cursor.Window).
    unchanged: int = 0


@dataclass
class MirrorReport:
    source: str = ""
    tables: dict[str, TableCounts] = field(default_factory=dict)
    receipts: int = 0
    intents: int = 0
    settled: int = 0
    # Pages written again after PostgreSQL chose them as a deadlock's victim.
    deadlocks: int = 0
    problems: list[Problem] = field(default_factory=list)
    tables_missing: list[str] = field(default_factory=list)
    columns_missing: list[str] = field(default_factory=list)  # "table.column"
    seconds: float = 0.0
    # Paperclip's snapshot was the last complete iteration's: nothing was read.
    source_unchanged: bool = False

    @property
    def rows_read(self) -> int:
        return sum(t.read for t in self.tables.values())

    @property
    def rows_mirrored(self) -> int:
        return sum(t.applied for t in self.tables.values())

    @property
    def unchanged(self) -> int:
        return sum(t.unchanged for t in self.tables.values())

    @property
    def skipped(self) -> int:
        return sum(t.skipped for t in self.tables.values())

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables.values())

    @property
    def not_sandbox(self) -> int:
        return sum(t.not_sandbox for t in self.tables.values())

    def merge(self, other: MirrorReport) -> None:
        """Add what `other` counted and reported (a page's write, another
        process's tables) to this report."""
        for name, theirs in other.tables.items():
            ours = self.tables.setdefault(name, TableCounts())
            for counter in fields(TableCounts):
                total = getattr(ours, counter.name) + getattr(theirs, counter.name)
                setattr(ours, counter.name, total)
        self.receipts += other.receipts
        self.intents += other.intents
        self.settled += other.settled
        self.deadlocks += other.deadlocks
        self.problems.extend(other.problems)

    def by_reason(self, action: str) -> Counter:
        """(table, reason kind) → rows, for one action ("skipped"/"quarantined")."""
        return Counter((p.table, p.kind) for p in self.problems if p.action == action)

    @staticmethod
    def _reasons(counts: Counter) -> str:
        return "; ".join(f"{table}: {kind} ×{n}" for (table, kind), n in sorted(counts.items()))

    def summary(self) -> str:
        """One line: rows mirrored, leases that are not a sandbox, skipped by
        reason, quarantined by reason, tables (and columns) missing."""
        parts = [f"{name} {c.applied}/{c.read}" for name, c in self.tables.items() if c.read]
        idle = "nothing changed" + (" since the last iteration" if self.source_unchanged else "")
        line = (
            f"mirrored {self.rows_mirrored} of {self.rows_read} rows read from {self.source}"
            f" in {self.seconds:.1f}s ({', '.join(parts) or idle});"
            f" {self.receipts} new receipts, {self.intents} pending intents and exports,"
            f" {self.settled} settled"
        )
        skipped, quarantined = self.by_reason("skipped"), self.by_reason("quarantined")
        if self.unchanged:
            line += f"; {self.unchanged} read again unchanged"
        if self.deadlocks:
            line += f"; {self.deadlocks} pages written again after a deadlock"
        line += f"; not a sandbox: {self.not_sandbox}"
        line += f"; skipped {self.skipped}" + (f" ({self._reasons(skipped)})" if skipped else "")
        line += f"; quarantined {self.quarantined}" + (
            f" ({self._reasons(quarantined)})" if quarantined else ""
        )
        line += "; tables missing: " + (", ".join(self.tables_missing) or "none")
        if self.columns_missing:
            line += "; columns missing: " + ", ".join(self.columns_missing)
        return line
