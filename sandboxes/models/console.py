"""The console's own records: retirements, receipts, attachments, audit (API
tokens and ingested event ids: tokens.py; the reconciler's passes: passes.py)."""

import uuid
from collections.abc import Mapping
from datetime import timedelta

from django.conf import settings
from django.db import connection, models
from django.db.models import Exists, OuterRef, Q, Subquery

from sandboxes.rules.proof import PROOF_KINDS

from .choices import (
    STAGES_CLOSED,
    WORKABLE_STAGES,
    HoldCode,
    ReceiptKind,
    RetirementKind,
    Stage,
    TerminationState,
    enum_check,
)
from .mirror import ISSUE_PEOPLE, Environment, EnvironmentLease, HeartbeatRun, Issue
from .scope import ScopedQuerySet


class AppendOnlyError(Exception):
    """Raised when code tries to change or delete an append-only row."""


class AppendOnlyModel(models.Model):
    """Rows are inserted once and never changed. The database enforces it too
    (triggers in migration 0002); this guard gives a clearer error in Python."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")


# A record is open until it closes as retired, dismissed or corrected: the one
# definition of "open" (RetirementQuerySet.open, Retirement.is_open, and the
# one-open-record-per-sandbox constraint).
OPEN_RECORDS = ~Q(stage__in=list(STAGES_CLOSED))

# How long a claim holds (docs/rules.md, claims and failures): a worker that
# dies strands its record this long. A pass that has not beaten for as long
# has lost every claim it held, and is taken for gone.
CLAIM_SECONDS = 15 * 60
PASS_SILENT_AFTER = timedelta(seconds=CLAIM_SECONDS)


class RetirementQuerySet(ScopedQuerySet):
    """The questions views, the API, metrics and the reconciler ask of the
    records, asked the same way everywhere."""

    # A record's company is its lease's (README, company scope).
    company_path = "lease__company_id"

    def open(self):
        return self.filter(OPEN_RECORDS)

    def due(self, now):
        """Due work, plus held records still flagged as started by a dead worker:
        the sandbox they started must be stopped before they wait
        (docs/architecture.md, claimed). Claimed or not: the claim filters that."""
        return self.filter(
            Q(stage__in=WORKABLE_STAGES, next_attempt_at__lte=now)
            | Q(stage=Stage.HELD, started_for_salvage=True)
        )

    def with_hold(self, code: str):
        """Records whose hold list holds `code`. PostgreSQL has JSON containment;
        SQLite (the embedded `make run`) does not, so match the quoted code in
        the stored text instead (codes are plain identifiers)."""
        if connection.vendor == "postgresql":
            return self.filter(holds__contains=[code])
        return self.filter(holds__icontains=f'"{code}"')

    def with_owners(self):
        """The records with their task's people joined, so that each record's
        `lease.issue.owner()` reads no more rows: one query for a page."""
        return self.select_related(
            "lease__issue", *(f"lease__issue__{path}" for path in ISSUE_PEOPLE)
        )

    def with_company(self):
        """Each record's company name as `company_name`, in the same query (a
        record's company is its lease's `company_id`, not a foreign key)."""
        from .people import Company

        name = Company.objects.filter(pk=OuterRef("lease__company_id")).values("name")[:1]
        return self.annotate(company_name=Subquery(name))

    def search(self, text: str):
        """A sandbox id (part of it), a task key, or a record, lease or run id."""
        text = text.strip()
        if not text:
            return self
        cond = Q(provider_lease_id__icontains=text) | Q(lease__issue__key__iexact=text)
        try:
            value = uuid.UUID(text)
        except ValueError:
            pass
        else:
            cond |= Q(pk=value) | Q(lease_id=value) | Q(lease__heartbeat_run_id=value)
        return self.filter(cond)

    def matching(self, filters: Mapping):
        """The list filters of the console and the API, already validated:
        `stage` ("" or "open": open records, "all", or one stage), `kind`,
        `hold`, `environment` (an id, else a name), `provider_state`,
        `attention` ("yes"/"no"), `company` (a company id) and `q` (search).
        Empty values filter nothing."""
        qs = self
        stage = filters.get("stage") or ""
        if stage in ("", "open"):
            qs = qs.open()
        elif stage != "all":
            qs = qs.filter(stage=stage)
        if kind := filters.get("kind"):
            qs = qs.filter(kind=kind)
        if code := filters.get("hold"):
            qs = qs.with_hold(code)
        if environment := filters.get("environment"):
            try:
                qs = qs.filter(environment_id=uuid.UUID(str(environment)))
            except ValueError:
                qs = qs.filter(environment__name=environment)
        if company := filters.get("company"):
            qs = qs.filter(lease__company_id=company)
        if provider_state := filters.get("provider_state"):
            qs = qs.filter(provider_state=provider_state)
        if filters.get("attention") == "yes":
            qs = qs.filter(needs_attention=True)
        elif filters.get("attention") == "no":
            qs = qs.filter(needs_attention=False)
        return qs.search(filters.get("q") or "")

    def awaiting_decision(self):
        """At awaiting approval with no approval since its newest proof: what the
        approvals queue and the dashboard's tile count (an approved record waits
        only for the next pass: docs/rules.md, "An approval counts only for the
        proof it approved")."""
        return self.filter(stage=Stage.AWAITING_APPROVAL).exclude(Exists(_approval_standing()))

    def approved_for_next_pass(self):
        """At awaiting approval, approved since its newest proof: the next pass retires it."""
        return self.filter(stage=Stage.AWAITING_APPROVAL).filter(Exists(_approval_standing()))


def _approval_standing():
    """An approval receipt of the outer record that no later proof receipt
    supersedes. The exact check, bound to the sandbox's fingerprint, is
    `sandboxes/rules/proof.py:has_approval`; this is its cheap SQL half."""
    newer_proof = Receipt.objects.filter(
        retirement=OuterRef("retirement"),
        kind__in=PROOF_KINDS,
        confirmed_at__gt=OuterRef("confirmed_at"),
    )
    return Receipt.objects.filter(retirement=OuterRef("pk"), kind=ReceiptKind.APPROVAL).exclude(
        Exists(newer_proof)
    )


class Retirement(models.Model):
    """One kept sandbox the reconciler has listed; unique while open."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    lease = models.ForeignKey(
        EnvironmentLease, on_delete=models.PROTECT, related_name="retirements"
    )
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="retirements"
    )
    provider = models.CharField(max_length=64)
    provider_lease_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=32, choices=RetirementKind.choices)
    stage = models.CharField(max_length=20, choices=Stage.choices, default=Stage.LISTED)
    holds = models.JSONField(
        default=list, blank=True, help_text="Hold codes, recomputed each pass."
    )
    hold_reasons = models.JSONField(
        default=dict, blank=True, help_text="Hold code → one-line explanation."
    )
    operator_hold_reason = models.TextField(blank=True)
    # Who holds it, since when and until when (None: until released; docs/rules.md, holds).
    operator_hold_by = models.CharField(max_length=200, blank=True)
    operator_hold_at = models.DateTimeField(null=True, blank=True)
    operator_hold_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    failing_since = models.DateTimeField(
        null=True, blank=True, help_text="When the current run of failed attempts began."
    )
    needs_attention = models.BooleanField(default=False)
    # Fenced claim: a worker owns the row while attempt_id matches and
    # claimed_until is in the future.
    attempt_id = models.UUIDField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    provider_state = models.CharField(max_length=20, blank=True)
    provider_state_at = models.DateTimeField(null=True, blank=True)
    started_for_salvage = models.BooleanField(
        default=False, help_text="The console started the sandbox and must stop it again."
    )
    size_bytes = models.BigIntegerField(null=True, blank=True)
    # The sandbox's sizes as the provider last reported them on a status read
    # (Daytona's `cpu`, `memory`, `disk`; the local provider measures disk).
    # None is unknown, never 0: a cost needs them (docs/rules.md, what a kept
    # sandbox costs).
    reported_cpu = models.FloatField(null=True, blank=True, help_text="vCPUs.")
    reported_memory_gib = models.FloatField(null=True, blank=True, help_text="GiB of memory.")
    reported_disk_gib = models.FloatField(null=True, blank=True, help_text="GiB of disk.")
    reported_at = models.DateTimeField(null=True, blank=True)
    # The notice period (auto mode): retired no earlier than retire_after, and
    # only with the proof the notice announced (notice_proof: its receipt id).
    retire_after = models.DateTimeField(null=True, blank=True)
    notice_proof = models.CharField(max_length=64, blank=True)
    listed_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_reason = models.CharField(max_length=200, blank=True)

    objects = RetirementQuerySet.as_manager()

    class Meta:
        constraints = [
            enum_check("kind", RetirementKind, model="retirement"),
            enum_check("stage", Stage, model="retirement"),
            models.UniqueConstraint(
                fields=["provider", "provider_lease_id"],
                condition=OPEN_RECORDS,
                name="retirement_one_open_per_sandbox",
            ),
            models.CheckConstraint(
                condition=Q(attempt_id__isnull=True) | Q(claimed_until__isnull=False),
                name="retirement_claim_has_deadline",
            ),
        ]
        indexes = [
            models.Index(fields=["stage", "next_attempt_at"], name="retirement_due"),
            models.Index(fields=["provider", "provider_lease_id"], name="retirement_sandbox"),
            models.Index(fields=["kind", "stage"], name="retirement_kind_stage"),
            # The pass's question each time: which operator holds have ended.
            models.Index(
                fields=["operator_hold_until"],
                condition=Q(operator_hold_until__isnull=False),
                name="retirement_hold_until",
            ),
        ]
        permissions = [
            ("approve_retirement", "Can approve a retirement"),
            ("retry_retirement", "Can retry a retirement now"),
            ("hold_retirement", "Can hold or release a hold on a retirement"),
            ("attest_retirement", "Can discard unsaved work and retire"),
            ("export_audit", "Can export the audit trail"),
            ("manage_tokens", "Can create and revoke API tokens"),
            ("view_console", "Can read the console"),
            ("download_salvage", "Can download what was salvaged from a sandbox"),
        ]

    def __str__(self):
        return f"{self.kind} {self.provider_lease_id} ({self.stage})"

    @classmethod
    def current_for_sandbox(cls, sandbox_id: str, *related: str, actor) -> "Retirement | None":
        """The open record for a provider sandbox id, else its most recent closed
        one, among the records `actor` may see (None: the system, every record)."""
        if "\x00" in sandbox_id:
            return None  # no sandbox id holds NUL, and PostgreSQL refuses it in a query
        closed = models.Case(
            models.When(stage__in=list(STAGES_CLOSED), then=models.Value(1)),
            default=models.Value(0),
            output_field=models.IntegerField(),
        )
        return (
            cls.objects.visible_to(actor)
            .select_related(*related)
            .with_company()
            .filter(provider_lease_id=sandbox_id)
            .annotate(closed=closed)
            .order_by("closed", "-listed_at")
            .first()
        )

    def clear_operator_hold(self) -> None:
        """Forget the operator's hold (released, or its end has come); the stage
        stays: the reconciler recomputes holds and stage when the record is due."""
        self.operator_hold_reason, self.operator_hold_by = "", ""
        self.operator_hold_at = self.operator_hold_until = None
        self.holds = [h for h in (self.holds or []) if h != HoldCode.OPERATOR_HOLD]
        self.hold_reasons = {
            k: v for k, v in (self.hold_reasons or {}).items() if k != HoldCode.OPERATOR_HOLD
        }

    @property
    def is_open(self) -> bool:
        """The record's own stage against OPEN_RECORDS' stage list."""
        return self.stage not in STAGES_CLOSED


class ReceiptQuerySet(ScopedQuerySet):
    """The receipts the proof rule, the console's pages, the API and the
    reconciler read, asked the same way everywhere (oldest first: Meta.ordering)."""

    # The lease's company: the receipt's own may be missing (a reporter sent none).
    company_path = "lease__company_id"

    def proof_of(self, records):
        """The proof and approval receipts of `records` (retirements, their ids,
        or a queryset of them): what the proof rule and an approval read
        (docs/rules.md, proof)."""
        return self.filter(retirement__in=records, kind__in=(*PROOF_KINDS, ReceiptKind.APPROVAL))

    def of_sandbox(self, provider: str, sandbox_id: str):
        """Every receipt naming the sandbox, whichever lease or record it came with."""
        return self.filter(provider_lease_id=sandbox_id, lease__provider=provider)

    def salvage_of(self, provider: str, sandbox_id: str):
        """What was salvaged from the sandbox: its verified `salvage_export`
        receipts, whichever record wrote them, oldest first. An unverified or
        stale export proves nothing and holds nothing to restore
        (Receipt.is_salvage asks the same of a receipt already read)."""
        return self.of_sandbox(provider, sandbox_id).filter(
            kind=ReceiptKind.SALVAGE_EXPORT, payload__verified=True
        )


class Receipt(AppendOnlyModel):
    """Proof of a confirmed step. A queued request is not a receipt."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    kind = models.CharField(max_length=32, choices=ReceiptKind.choices)
    # Neither has an index of its own: receipt_unique_request leads with the
    # lease (and kind), receipt_retirement_kind with the retirement (migration 0031).
    lease = models.ForeignKey(
        EnvironmentLease, on_delete=models.PROTECT, related_name="receipts", db_index=False
    )
    run = models.ForeignKey(
        HeartbeatRun, null=True, blank=True, on_delete=models.PROTECT, related_name="receipts"
    )
    retirement = models.ForeignKey(
        Retirement, models.PROTECT, null=True, blank=True, related_name="receipts", db_index=False
    )
    provider_lease_id = models.CharField(max_length=200)
    # The company Paperclip's receipt names (companyId); None when the reporter
    # sent none. Paperclip's predicates bind a receipt to its lease's company.
    company_id = models.UUIDField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=TerminationState.choices, null=True, blank=True)
    schema = models.CharField(max_length=100, blank=True)
    confirmed_at = models.DateTimeField()
    request_id = models.CharField(max_length=200)
    payload = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=200, blank=True, help_text="Who wrote it: system or user.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ReceiptQuerySet.as_manager()

    class Meta:
        ordering = ["confirmed_at", "created_at"]
        constraints = [
            enum_check("kind", ReceiptKind, model="receipt"),
            enum_check("state", TerminationState, model="receipt", nullable=True),
            models.UniqueConstraint(
                fields=["lease", "kind", "request_id"], name="receipt_unique_request"
            ),
        ]
        indexes = [
            models.Index(fields=["retirement", "kind"], name="receipt_retirement_kind"),
        ]

    def __str__(self):
        return f"{self.kind} receipt for {self.provider_lease_id}"

    @property
    def is_salvage(self) -> bool:
        """ReceiptQuerySet.salvage_of's question, of this receipt."""
        return (
            self.kind == ReceiptKind.SALVAGE_EXPORT and (self.payload or {}).get("verified") is True
        )


def attachment_path(instance: "Attachment", filename: str) -> str:
    digest = instance.sha256
    return f"attachments/{digest[:2]}/{digest[2:4]}/{digest}"


class AttachmentQuerySet(ScopedQuerySet):
    company_path = "issue__company_id"  # the task it is attached to


class Attachment(models.Model):
    """A salvaged file attached to its task. Stored bytes are content-addressed
    by sha256, so the same content is kept once however many paths name it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    issue = models.ForeignKey(Issue, on_delete=models.PROTECT, related_name="attachments")
    retirement = models.ForeignKey(
        Retirement, null=True, blank=True, on_delete=models.PROTECT, related_name="attachments"
    )
    path = models.CharField(max_length=1000, help_text="Path relative to the workspace root.")
    sha256 = models.CharField(max_length=64, db_index=True)
    size = models.BigIntegerField()
    file = models.FileField(upload_to=attachment_path, max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AttachmentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(size__gte=0), name="attachment_size_nonnegative"),
            models.CheckConstraint(
                condition=Q(sha256__regex=r"^[0-9a-f]{64}$"), name="attachment_sha256_hex"
            ),
        ]

    def __str__(self):
        return f"{self.path} ({self.sha256[:12]})"

    @staticmethod
    def storage_name(sha256: str) -> str:
        return attachment_path(Attachment(sha256=sha256), "")


class AuditEventQuerySet(ScopedQuerySet):
    def visible_to(self, actor):
        """The rows of the actor's companies; a row that names no company but a
        sandbox (written before rows carried one, or by ingest for a lease it
        had not read) goes with that sandbox's leases."""

        def condition(ids):
            theirs = EnvironmentLease.objects.filter(company_id__in=ids)
            return Q(company_id__in=ids) | Q(
                company_id__isnull=True, sandbox_id__in=theirs.values("provider_lease_id")
            )

        return self.filter_visible(actor, condition)


class AuditEvent(AppendOnlyModel):
    """Who did what to which object, why, and the before and after."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    actor_label = models.CharField(max_length=200, help_text="Username, token name or 'system'.")
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=200)
    sandbox_id = models.CharField(max_length=200, blank=True, db_index=True)
    reason = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    # The company of the object acted on (a record's lease's, an environment's);
    # None for console-wide objects (users, tokens): seen only by the unlimited.
    company_id = models.UUIDField(null=True, blank=True, db_index=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at"]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.object_id}"
