"""The SQL side of Paperclip's proof and of recovery on the task: the facts the
candidate query reads about a lease's receipts and recovery actions
(docs/rules.md, candidate kinds and holds). The same questions in Python are
`sandboxes.rules.paperclip`; tests/reconciler/test_paperclip_predicates.py
checks the two agree."""

from __future__ import annotations

from django.db.models import BooleanField, Case, Exists, OuterRef, Q, Value, When
from django.db.models.fields.json import KT
from django.db.models.lookups import IsNull

from sandboxes.models import Receipt, RecoveryAction
from sandboxes.models.choices import RECOVERY_OPEN, ReceiptKind, TerminationState
from sandboxes.rules import paperclip


def stop_receipt():
    """A confirmed stopped termination: Paperclip's `hasRemoteTerminationReceipt`
    with state `stopped`, condition by condition as
    `sandboxes.rules.paperclip:termination_refusal` (docs/rules.md, candidate
    kinds; tests/reconciler/test_paperclip_predicates.py checks they agree). The
    lease's own conditions are `TERMINATED`; these are the receipt's: a
    termination for exactly this lease, its run and its sandbox, of Paperclip's
    schema, its company where the lease has one, its provider where the receipt
    names one, never mirrored for provider `local`."""
    return (
        Receipt.objects.annotate(
            named_provider=KT("payload__provider"), source=KT("payload__source")
        )
        .filter(
            lease=OuterRef("pk"),
            run=OuterRef("heartbeat_run_id"),
            provider_lease_id=OuterRef("provider_lease_id"),
            kind=ReceiptKind.TERMINATION,
            state=TerminationState.STOPPED,
            schema=paperclip.TERMINATION_SCHEMA,
        )
        .filter(Q(company_id=OuterRef("company_id")) | IsNull(OuterRef("company_id"), True))
        .filter(Q(named_provider__isnull=True) | Q(named_provider=OuterRef("provider")))
        # Spelled out: an exclude() of the pair drops every receipt with no
        # `source` (NULL AND true is NULL), i.e. every one not mirrored.
        .filter(
            Q(source__isnull=True)
            | ~Q(source=paperclip.MIRROR_SOURCE)
            | ~Q(lease__provider="local")
        )
    )


# hasRemoteTerminationReceipt's conditions on the lease row itself
# (remote-execution-termination.ts @ 555fcfc lines 29-30, 12).
TERMINATED = Q(
    released_at__isnull=False,
    cleanup_status="success",
    status__in=paperclip.TERMINATED_STATUSES,
    heartbeat_run_id__isnull=False,
) & ~Q(provider="")


def _recovery_actions():
    """The recovery actions that say which sandboxes a recovery was about (for
    `closed_restore_source`): those naming the lease, and those naming no lease
    on its task."""
    return RecoveryAction.objects.filter(
        Q(lease=OuterRef("pk")) | Q(lease__isnull=True, source_issue=OuterRef("issue_id"))
    )


# Paperclip marks a workspace-restore source on the lease itself
# (legacy-workspace-restore-recovery.ts, preserveLegacyWorkspaceRestoreSources):
# such a lease is a restore source whichever recovery action on its task names it.
RESTORE_MARKER = "workspaceRestoreRecovery"
# The console's own recovery action for a preservation source (seed 003).
FILE_RECOVERY = "file_recovery"


def recovery_concerns() -> Case:
    """Some recovery action concerns the lease (docs/rules.md, candidate kinds)."""
    on_task = RecoveryAction.objects.filter(source_issue=OuterRef("issue_id"))
    return Case(
        When(Q(metadata__has_key=RESTORE_MARKER) & Exists(on_task), then=Value(True)),
        When(Exists(_recovery_actions()), then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )


def open_recovery_on_task():
    """docs/rules.md, holds (`recovery_open`): an open recovery action of
    Paperclip's on the task holds every sandbox of the task, whichever lease it
    names (Paperclip keeps one open action per issue: the unique index
    issue_recovery_actions_active_source_uq on (company_id, source_issue_id)).
    The console's own file-recovery action holds only the lease it names."""
    return RecoveryAction.objects.filter(status__in=RECOVERY_OPEN).filter(
        Q(lease=OuterRef("pk"))
        | (Q(source_issue=OuterRef("issue_id")) & ~Q(kind=FILE_RECOVERY, lease__isnull=False))
    )


def recovery_words(what: str | None) -> str:
    """ "restore recovery on PAP-142" from the open action's "kind|task key"."""
    if not what:
        return ""
    kind, _, key = what.partition("|")
    words = kind.replace("_", " ").strip() or "a"
    if not words.endswith("recovery"):
        words += " recovery"
    return f"{words} on {key or 'the task'}"
