"""Which lease rows are kept-sandbox candidates, and the facts their holds need.

One SQL query lists every candidate with all hold facts (EXISTS subqueries on
indexed columns), so listing plus hold evaluation costs the same number of
queries at any fleet size. Only the newest lease row per sandbox is judged,
and rows whose graph still has placeholders are skipped (docs/rules.md, candidate kinds).

Its cost follows what is kept, not history: it reads only rows in a status some
kind needs that no later row on their sandbox supersedes (the partial index
`lease_keepable`; `superseded` is kept by the database, migration 0009). Both
are shortcuts for tests the query makes in full anyway.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import uuid
from contextlib import contextmanager
from functools import reduce

from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Exists,
    F,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Concat
from django.db.models.lookups import IsNull

from sandboxes.models import (
    EnvironmentLease,
    HeartbeatRun,
    LeaseIntent,
    PendingExport,
)
from sandboxes.models.choices import (
    ISSUE_CLOSED,
    KEEPABLE_STATUSES,
    RUN_LIVE,
    RUN_UNSUCCESSFUL,
    SHARING_STATUSES,
    WARM_POLICIES,
    Disposition,
    ExportState,
    IntentState,
    LeasePolicy,
    LeaseStatus,
    RetirementKind,
)
from sandboxes.rules.frozen import build
from sandboxes.rules.holds import LeaseFacts
from sandboxes.rules.listing import Candidate
from sandboxes.rules.window import stored_window

from .proof_facts import (
    TERMINATED,
    open_recovery_on_task,
    recovery_concerns,
    recovery_words,
    stop_receipt,
)
from .rows import fetch_rows, fetch_sql, psycopg_rows

KEPT_RESTORE_STATUSES = (LeaseStatus.RELEASED, LeaseStatus.FAILED, LeaseStatus.RETAINED)
# A sandbox that still exists at the provider, as far as the lease row says.
KEPT_STATUSES = (LeaseStatus.RELEASED, LeaseStatus.FAILED, LeaseStatus.RETAINED)
RESUME_FAILED = "resume_failed"


def _same_sandbox():
    return EnvironmentLease.objects.filter(
        provider=OuterRef("provider"), provider_lease_id=OuterRef("provider_lease_id")
    ).exclude(pk=OuterRef("pk"))


def _newer_row():
    """Another row on the same sandbox that sorts newer: a later acquired_at, or
    the same one and a larger id, so exactly one row is the newest. A row with
    no acquired_at cannot be ordered: it never hides a dated row (the sandbox
    stays visible), a dated row is newer than it, and every row of a sandbox
    with an undated row is held `unknown_age` (docs/rules.md, holds)."""
    return _same_sandbox().filter(
        Q(acquired_at__gt=OuterRef("acquired_at"))
        | Q(acquired_at=OuterRef("acquired_at"), pk__gt=OuterRef("pk"))
        | (Q(acquired_at__isnull=False) & IsNull(OuterRef("acquired_at"), True))
        | (
            Q(acquired_at__isnull=True, pk__gt=OuterRef("pk"))
            & IsNull(OuterRef("acquired_at"), True)
        )
    )


# What a sandbox's other rows say, read in one probe of them (`other_rows`, a
# bit each; NULL if there is none).
RESUMABLE_ELSEWHERE, UNDATED_ROW, SANDBOX_SHARED = 1, 2, 4


def _other_rows():
    """The sandbox's other rows, one index probe for three hold facts:
    - RESUMABLE_ELSEWHERE: one its task can still resume (released or retained,
      the task bound to that row's workspace and not done). Checked over every
      row, not only the newest: clocks skew (docs/rules.md, holds);
    - UNDATED_ROW: one with no acquired_at (the rows cannot be ordered);
    - SANDBOX_SHARED: one in a sharing status."""
    resumable = Q(
        status__in=(LeaseStatus.RELEASED, LeaseStatus.RETAINED),
        execution_workspace_id__isnull=False,
        issue__bound_workspace_id=F("execution_workspace_id"),
    ) & ~Q(issue__status__in=ISSUE_CLOSED)

    def bit(condition: Q, value: int) -> Max:
        return Max(Case(When(condition, then=Value(value)), default=Value(0)))

    rows = (
        _same_sandbox()
        .order_by()
        .values("provider")
        .annotate(
            resumable=bit(resumable, RESUMABLE_ELSEWHERE),
            undated=bit(Q(acquired_at__isnull=True), UNDATED_ROW),
            shared=bit(Q(status__in=SHARING_STATUSES), SANDBOX_SHARED),
        )
        .values(bits=F("resumable") + F("undated") + F("shared"))
    )
    return Subquery(rows, output_field=IntegerField())


def _facts_annotations() -> dict:
    return {
        "bound_here": Case(
            When(issue__bound_workspace_id=F("execution_workspace_id"), then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        ),
        "has_stop_receipt": Case(
            When(TERMINATED & Exists(stop_receipt()), then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        ),
        "newer_lease": Exists(_newer_row()),
        "other_rows": _other_rows(),
        "issue_run_live": Exists(
            HeartbeatRun.objects.filter(issue=OuterRef("issue_id"), status__in=RUN_LIVE)
        ),
        # docs/rules.md, candidate kinds and holds: the recovery actions that
        # concern a lease are those naming it (Paperclip's restore evidence lists
        # lease ids; the mirror keeps one row per lease named) and those naming
        # no lease on its task.
        # An action naming another lease concerns that lease only (seed 003's
        # file recovery holds only its own sandbox).
        "recovery_any": recovery_concerns(),
        "recovery_open_lease": Exists(open_recovery_on_task()),
        # What the recovery_open hold names: the open action's kind and task.
        "recovery_open_what": Subquery(
            open_recovery_on_task()
            .order_by("created_at", "id")
            .annotate(what=Concat(F("kind"), Value("|"), F("source_issue__key")))
            .values("what")[:1],
            output_field=CharField(),
        ),
        "export_pending": Exists(
            PendingExport.objects.filter(lease=OuterRef("pk"), state=ExportState.PENDING)
        ),
        "intent_pending": Exists(
            LeaseIntent.objects.filter(lease=OuterRef("pk"), state=IntentState.PENDING)
        ),
    }


# The kind predicates, without the newest-row rule (which listing adds and a
# re-check reports as the `newer_lease` hold). Order matters: first match wins.
_bound_elsewhere = Q(issue__bound_workspace_id__isnull=False, bound_here=False)
_run_not_live = Q(heartbeat_run_id__isnull=True) | ~Q(heartbeat_run__status__in=RUN_LIVE)

# Each predicate in two parts, ANDed: the tests on the lease row and its task,
# then the rest (its run, receipts and recovery actions). The listing also
# filters on the first parts alone (MAY_MATCH_A_KIND), so PostgreSQL drops most
# kept rows as soon as it has read their task, before it reads their run or
# evaluates the kind.
_KIND_PARTS: list[tuple[str, Q, Q]] = [
    (
        RetirementKind.RESUME_FAILED,
        Q(status=LeaseStatus.PENDING_CLEANUP, failure_reason=RESUME_FAILED),
        Q(),
    ),
    (
        # Seed 002: an unsuccessful run's sandbox kept running (status `retained`,
        # or a `keep_running` release) with no confirmed stop for that run. The
        # release is recorded as sent, so this matches whichever of the run's
        # final status and the release arrived first.
        RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN,
        Q(status=LeaseStatus.RETAINED)
        | Q(disposition=Disposition.KEEP_RUNNING, status__in=KEPT_STATUSES),
        # Column tests first, the receipt probe last: Q(**kwargs) would sort the
        # probe first, and PostgreSQL then hashes every receipt ever written.
        Q(heartbeat_run__status__in=RUN_UNSUCCESSFUL) & Q(has_stop_receipt=False),
    ),
    (
        RetirementKind.SUPERSEDED_RUNNING_WARM,
        Q(lease_policy=LeasePolicy.REUSE_BY_ENVIRONMENT, status=LeaseStatus.RETAINED)
        & _bound_elsewhere,
        _run_not_live,
    ),
    (
        RetirementKind.ABANDONED_WARM,
        Q(lease_policy=LeasePolicy.REUSE_BY_ENVIRONMENT)
        & (Q(status=LeaseStatus.FAILED) | (Q(status=LeaseStatus.RELEASED) & _bound_elsewhere)),
        Q(),
    ),
    (
        RetirementKind.CLOSED_RESTORE_SOURCE,
        # Seed 000: a restore source whose recovery is over: at least one
        # recovery action concerns it, all of them closed, and the task moved on
        # (closed, or bound to another workspace). With no recovery action yet,
        # restore recovery owns it (seed 001, "Out of scope").
        Q(lease_policy=LeasePolicy.RETAIN_ON_FAILURE, status__in=KEPT_RESTORE_STATUSES)
        & (Q(issue__status__in=ISSUE_CLOSED) | _bound_elsewhere),
        Q(recovery_any=True) & Q(recovery_open_lease=False),
    ),
    (
        RetirementKind.DONE_TASK_WARM,
        Q(
            lease_policy__in=WARM_POLICIES,
            status=LeaseStatus.RELEASED,
            issue__status__in=ISSUE_CLOSED,
        ),
        Q(),
    ),
]
KIND_PREDICATES: list[tuple[str, Q]] = [(kind, row & rest) for kind, row, rest in _KIND_PARTS]
# True for every row that matches some kind (each predicate implies its row
# tests); false for most kept rows (released, task open and bound here). A CASE,
# not the bare OR: PostgreSQL would pull the OR's lease-only parts out as an
# index condition, underestimate it and scan every `released` row of history
# (lease_status_policy) instead of the kept ones (lease_keepable), 2x slower
# at 1M leases.
MAY_MATCH_A_KIND = Case(
    When(reduce(operator.or_, (row for _, row, _ in _KIND_PARTS)), then=Value(True)),
    default=Value(False),
    output_field=BooleanField(),
)

GRAPH_COMPLETE = (
    Q(placeholder=False, environment__placeholder=False)
    & (Q(issue_id__isnull=True) | Q(issue__placeholder=False))
    & (Q(execution_workspace_id__isnull=True) | Q(execution_workspace__placeholder=False))
    & (Q(heartbeat_run_id__isnull=True) | Q(heartbeat_run__placeholder=False))
)

# The columns a listing reads, in the order _to_candidate unpacks them: rows
# come back as tuples (values_list), so building a candidate costs no dict per row.
FACT_FIELDS = (
    "id",
    "status",
    "acquired_at",
    "released_at",
    "environment__warm_retention",
    "issue__status",
    "bound_here",
    "heartbeat_run__status",
    "execution_workspace__writer_run_id",
    "execution_workspace__save_state",
    "issue_run_live",
    "recovery_open_lease",
    "export_pending",
    "intent_pending",
    "newer_lease",
    "has_stop_receipt",
    "other_rows",
    "provider",
    "provider_lease_id",
    "environment_id",
    "environment__retirement_mode",
    "kind",
    "recovery_open_what",
    "environment__time_zone",
    "environment__window_days",
    "environment__window_start",
    "environment__window_end",
)


def annotated_leases() -> QuerySet:
    """Lease rows annotated with their hold facts and matching `kind` (or NULL)."""
    kind = Case(
        *(When(predicate, then=Value(str(k))) for k, predicate in KIND_PREDICATES),
        default=Value(None),
        output_field=CharField(),
    )
    return EnvironmentLease.objects.annotate(**_facts_annotations()).annotate(kind=kind)


def _listable(environment_id=None) -> QuerySet:
    """Kept rows whose graph is complete and that match a kind, newest or not.

    MAY_MATCH_A_KIND repeats a test `kind` makes anyway, in a form PostgreSQL
    applies as soon as it has read the row's task, before it reads the run and
    evaluates `kind` (at 100k leases it drops 3 of 4 kept rows there).
    `newer_lease` is left to the caller: as a filter, PostgreSQL probes every
    kept row's sandbox for it, though `superseded` leaves few rows that have one;
    read, it probes only the rows that match a kind."""
    qs = (
        annotated_leases()
        .filter(superseded=False, status__in=KEEPABLE_STATUSES)
        .filter(MAY_MATCH_A_KIND)
        .filter(GRAPH_COMPLETE, kind__isnull=False)
    )
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    return qs


# The LeaseFacts fields a FACT_FIELDS row holds as they are: its first columns, in order.
_AS_READ = tuple(f.name for f in dataclasses.fields(LeaseFacts)[:14])


def _to_candidate(row: tuple) -> Candidate:
    """A candidate from one FACT_FIELDS row, its two frozen dataclasses each
    built in one update (sandboxes/rules/frozen.py: a third of the time)."""
    (
        newer_lease,
        has_stop_receipt,
        other_rows,
        provider,
        sandbox,
        environment_id,
        mode,
        kind,
        recovery_open_what,
        *window,
    ) = row[len(_AS_READ) :]
    other_rows = other_rows or 0
    facts = build(
        LeaseFacts,
        zip(_AS_READ, row, strict=False),  # the row's first columns
        sandbox_shared=bool(other_rows & SANDBOX_SHARED),
        newer_lease=newer_lease,
        has_stop_receipt=has_stop_receipt,
        resumable_elsewhere=bool(other_rows & RESUMABLE_ELSEWHERE),
        undated_row=bool(other_rows & UNDATED_ROW),
        provider=provider,
        recovery_action=recovery_words(recovery_open_what),
        window=stored_window(*window),  # one Window per environment (cached)
    )
    return build(
        Candidate,
        lease_id=row[0],
        provider=provider,
        provider_lease_id=sandbox,
        environment_id=environment_id,
        retirement_mode=mode,
        kind=kind,
        facts=facts,
    )


@contextmanager
def _without_jit():
    """The listing's plan: it starts from the few kept rows (`lease_keepable`) and
    reaches everything else by index. PostgreSQL's defaults fight that at a
    million rows: JIT compiling costs more than executing (~0.7 s of 1.1 s at
    100k leases), and random_page_cost = 4 (a spinning disk) makes hashing whole
    history tables (every run, issue and receipt) look cheaper than a few
    thousand index probes into cached pages; so does walking every run and
    issue in index order for a merge join (~40 % of the query at 100k leases).
    Set for the listing transaction only."""
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SET LOCAL jit = off; SET LOCAL random_page_cost = 1.1; "
                "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
            )
        yield


_NEWER_LEASE = FACT_FIELDS.index("newer_lease")


def list_candidates(environment_id=None) -> list[Candidate]:
    """Every candidate (newest row per sandbox, complete graph) with its hold facts:
    one SELECT (plus SET LOCAL jit on PostgreSQL)."""
    with _without_jit():
        if psycopg_rows():
            rows = fetch_sql(*_listing_sql(connection.alias, environment_id))
        else:
            rows = list(_listable(environment_id).values_list(*FACT_FIELDS))
    return [_to_candidate(row) for row in rows if not row[_NEWER_LEASE]]


@functools.lru_cache(maxsize=64)
def _listing_sql(alias: str, environment_id) -> tuple[str, tuple]:
    """The listing's SQL and parameters, compiled once per database and scope:
    they depend on nothing else, and Django took ~20 ms to build and compile
    them on every listing (a tenth of one at 1M leases)."""
    sql, params = _listable(environment_id).values_list(*FACT_FIELDS).query.sql_with_params()
    return sql, tuple(params)


_fetch = fetch_rows  # its former name (tests/reconciler/test_candidates.py)


def judge_leases(lease_ids) -> dict[uuid.UUID, Candidate]:
    """Re-judge given lease rows (an open record's lease): `kind` ignores the
    newest-row rule, which shows up as the `newer_lease` hold. 1 query."""
    ids = list(lease_ids)
    if not ids:
        return {}
    with _without_jit():
        rows = annotated_leases().filter(GRAPH_COMPLETE, pk__in=ids).values_list(*FACT_FIELDS)
        judged = [_to_candidate(row) for row in rows]
    return {candidate.lease_id: candidate for candidate in judged}


def sandbox_rows(provider: str, provider_lease_id: str) -> dict[uuid.UUID, str]:
    """{lease id: status} of every lease row naming this sandbox: what the destroy
    gate judges, whatever lease the record started from. 1 query."""
    return dict(
        EnvironmentLease.objects.filter(
            provider=provider, provider_lease_id=provider_lease_id
        ).values_list("pk", "status")
    )


def judge_lease_locked(lease_id) -> Candidate | None:
    """Re-judge one lease under a row lock (call inside a transaction)."""
    list(EnvironmentLease.objects.select_for_update().filter(pk=lease_id).values_list("pk"))
    rows = annotated_leases().filter(GRAPH_COMPLETE, pk=lease_id).values_list(*FACT_FIELDS)
    for row in rows:
        return _to_candidate(row)
    return None
