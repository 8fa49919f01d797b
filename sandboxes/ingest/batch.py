"""One ingest batch's unit of work (`sandboxes.ingest.apply`): the rows the
batch names, read once (and locked), changed in memory as plain values by the
fold (`fold.py`), then written back, each table with one statement per kind
of write (`sql.py`)."""

from collections import defaultdict
from typing import Any, cast
from uuid import UUID

from sandboxes.models import Environment, EnvironmentLease, LeaseIntent, RecoveryAction

from . import sql
from .schemas import Event, EventError
from .sql import Mirrored

# A row's id. At run time always the canonical string (`schemas.plain_ids`):
# rows are keyed by it, without a uuid.UUID per lookup. Typed as the event
# schemas declare their ids.
Id = str | UUID


# Columns read for each row a batch names: what the fold (`fold.py`) needs to
# decide, and nothing it will overwrite blindly.
_ALWAYS = ("id", "placeholder", "source_updated_at")
_LOADED: dict[Mirrored, tuple[str, ...]] = {
    Environment: (
        *_ALWAYS,
        "name",
        "retirement_mode",
        "warm_retention",
        "max_retirements_per_pass",
        "workspace_root",
        "notice_period",
    ),
    EnvironmentLease: (*_ALWAYS, "provider", "provider_lease_id"),
    LeaseIntent: (*_ALWAYS, "request_id"),
    RecoveryAction: (*_ALWAYS, "lease_id", "evidence"),
}


class Row:
    """One row as the batch sees it: the columns read, then what events set.
    Attribute access reads and writes `values` (by attname)."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]):
        object.__setattr__(self, "values", values)

    @property
    def pk(self) -> Id:
        return cast(Id, self.values["id"])

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.values[name] = value


class UnitOfWork:
    """The rows a batch names, keyed by id as a canonical string (`plain_ids`)."""

    def __init__(self) -> None:
        self.rows: dict[Mirrored, dict[Id, Row]] = defaultdict(dict)
        # What each row held when read, for the rules that look at the before.
        self.baseline: dict[tuple[Mirrored, Id], dict[str, Any]] = {}
        # Rows the database did not have when read.
        self.new: dict[Mirrored, set[Id]] = defaultdict(set)
        # Rows an upsert applied to, and the columns the batch set on each.
        self.sent: dict[Mirrored, dict[Id, set[str]]] = defaultdict(dict)
        # Rows this batch inserted (not another batch meanwhile), once written.
        self.inserted: dict[Mirrored, set[Id]] = defaultdict(set)
        self.receipts: list[dict[str, Any]] = []
        self.errors: list[EventError] = []
        self.warnings: list[EventError] = []
        # Leases moved to another sandbox by a newer report: (event index, lease
        # id, (provider, sandbox) before, after, source time before, after).
        self.moves: list[tuple] = []
        # Environments whose policy the console already owns: known before the
        # batch, or created by an earlier event of it.
        self.policy_owned: set[Id] = set()

    def load(self, wanted: dict[Mirrored, set[Id]]) -> None:
        """Read (and lock, in id order) every row the batch names: one query."""
        reads = [(model, _LOADED.get(model, _ALWAYS), ids) for model, ids in wanted.items() if ids]
        if not reads:
            return
        for (model, _, _), rows in zip(reads, sql.read_rows(reads), strict=True):
            for values in rows:
                pk = values["id"]
                self.rows[model][pk] = Row(values)
                self.baseline[(model, pk)] = dict(values)

    def get(self, model: Mirrored, pk: Id) -> Row:
        """The row with this id; a placeholder if the batch or database has none."""
        row = self.rows[model].get(pk)
        if row is None:
            values: dict[str, Any] = {"id": pk, "placeholder": True, "source_updated_at": None}
            for key, value in model.placeholder_defaults.items():
                values[key] = value(pk) if callable(value) else value
            row = self.rows[model][pk] = Row(values)
            self.new[model].add(pk)
        return row

    def upsert(self, model: Mirrored, pk: Id, event: Event) -> Row | None:
        """The row an upsert event changes, or None when the row already holds a
        newer state from the source (events may arrive out of order)."""
        row = self.get(model, pk)
        values = row.values
        held = values["source_updated_at"]
        if held is not None and held > event.occurred_at:
            return None
        values["placeholder"] = False
        values["source_updated_at"] = event.occurred_at
        self.sent[model].setdefault(pk, set())
        if "company_id" in event.data.model_fields_set:  # absent: the row keeps its own
            self.set(model, row, company_id=event.data.company_id)  # type: ignore[attr-defined]
        return row

    def set(self, model: Mirrored, row: Row, **columns: Any) -> None:
        row.values.update(columns)
        self.sent[model][row.values["id"]].update(columns)

    def was_placeholder(self, model: Mirrored, pk: Id) -> bool:
        """Missing or a placeholder before this batch."""
        before = self.baseline.get((model, pk))
        return before is None or bool(before["placeholder"])

    def write(self) -> None:
        """Every table's new rows and the batch's receipts, then each table's rows
        that existed.

        New rows are inserted ON CONFLICT DO NOTHING (a row only named stays a
        placeholder, and never overwrites a row a concurrent batch inserted
        meanwhile), on PostgreSQL all in one statement (`sql.insert_new`); rows
        that existed, and new rows another batch inserted first, get one UPDATE
        per table of the columns the batch set, where the batch is not older."""
        models = sorted(self.rows, key=lambda model: model._meta.db_table)
        # In id order, like the read: two batches inserting the same new ids wait
        # for each other in one order, never in a cycle.
        new = {m: sorted(pk for pk in self.rows[m] if pk in self.new[m]) for m in models}
        inserts = [(m, [self.rows[m][pk].values for pk in new[m]]) for m in models]
        self.inserted.update(sql.insert_new(inserts, self.receipts))
        for model in models:
            rows, sent = self.rows[model], self.sent[model]
            changed = [pk for pk in sent if pk not in self.inserted[model]]
            if changed:
                sql.update(model, [(rows[pk].values, sent[pk]) for pk in changed])
