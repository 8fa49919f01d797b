"""Mirrors of Paperclip's rows: environments, issues, workspaces, runs, leases,
intents, pending exports and recovery actions.

Rows named by an event before their own upsert arrives are created as
placeholders (`placeholder=True`) and filled in later; the reconciler never
judges a sandbox whose graph still has placeholders.
"""

import uuid
from dataclasses import replace
from datetime import timedelta

from django.db import models
from django.db.models import Q

from sandboxes.providers.base import Provider
from sandboxes.providers.registry import get_provider
from sandboxes.rules.owner import OwnedAs, Owner, task_owner
from sandboxes.rules.window import STORED_DAYS_PATTERN, Window, stored_days, stored_window

from .choices import (
    KEEPABLE_STATUSES,
    RUN_LIVE,
    SHARING_STATUSES,
    CleanupStatus,
    Disposition,
    EnvironmentDriver,
    EnvironmentStatus,
    ExportState,
    IntentKind,
    IntentState,
    IssueStatus,
    LeasePolicy,
    LeaseStatus,
    ProviderName,
    RecoveryStatus,
    RetirementMode,
    RunStatus,
    SaveState,
    enum_check,
)
from .scope import ScopedQuerySet


def provider_named(model: str) -> models.CheckConstraint:
    """Any provider key Paperclip uses, but never an empty one."""
    return models.CheckConstraint(condition=~Q(provider=""), name=f"{model}_provider_named")


class MirroredModel(models.Model):
    placeholder = models.BooleanField(
        default=False, help_text="Named by an event before its own upsert arrived."
    )
    source_updated_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the source last changed this row (event occurred_at or the "
        "mirrored updated_at); an older upsert arriving late is ignored.",
    )
    # Paperclip is multi-company: every row it writes names one, and Paperclip's
    # own predicates bind receipts to it (docs/rules.md, proof). None when an
    # ingest client sends none: such rows are judged without it.
    company_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    # Columns a placeholder needs beyond the model defaults to pass NOT NULL and
    # CHECK constraints; values that can never make it a retirement candidate.
    placeholder_defaults: dict = {}

    @classmethod
    def placeholder_for(cls, pk):
        """An unsaved stand-in for a row an event or mirror names before it arrives."""
        defaults = {
            key: (value(pk) if callable(value) else value)
            for key, value in cls.placeholder_defaults.items()
        }
        return cls(pk=pk, placeholder=True, **defaults)


PRICE_FIELDS = (
    "price_vcpu_hour_running",
    "price_memory_gib_hour_running",
    "price_disk_gib_month_running",
    "price_vcpu_hour_stopped",
    "price_memory_gib_hour_stopped",
    "price_disk_gib_month_stopped",
)


class Environment(MirroredModel):
    placeholder_defaults = {"name": lambda pk: f"environment {pk}"}

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    name = models.CharField(max_length=200)
    driver = models.CharField(
        max_length=16, choices=EnvironmentDriver.choices, default=EnvironmentDriver.SANDBOX
    )
    # Paperclip's own provider key (`daytona`, `local`, `ssh`, `e2b`, a plugin
    # key…): every one is mirrored, and the console drives only ProviderName.
    provider = models.CharField(max_length=64, default=ProviderName.LOCAL)
    status = models.CharField(
        max_length=16, choices=EnvironmentStatus.choices, default=EnvironmentStatus.ACTIVE
    )
    # Console policy (docs/rules.md, what happens next).
    retirement_mode = models.CharField(
        max_length=16, choices=RetirementMode.choices, default=RetirementMode.OBSERVE
    )
    warm_retention = models.DurationField(default=timedelta(hours=24))
    max_retirements_per_pass = models.PositiveIntegerField(default=50)
    notice_period = models.DurationField(
        default=timedelta(0),
        help_text="Auto mode: announce a retirement this long before it (0: off).",
    )
    workspace_root = models.CharField(max_length=500, default="workspace")
    # The retirement window (docs/rules.md, the retirement window): destroys and
    # owner notices only on `window_days` ("mon,tue,…") from `window_start` to
    # `window_end`, local time in `time_zone` (IANA). All empty: any time.
    time_zone = models.CharField(
        max_length=64, blank=True, help_text="The retirement window's IANA time zone."
    )
    window_days = models.CharField(max_length=27, blank=True)
    window_start = models.TimeField(null=True, blank=True)
    window_end = models.TimeField(null=True, blank=True)
    api_url = models.URLField(blank=True, help_text="Provider API URL; blank uses DAYTONA_API_URL.")
    api_key_env = models.CharField(
        max_length=100,
        default="DAYTONA_API_KEY",
        help_text="Name of the environment variable holding the provider token.",
    )
    toolbox_hosts = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "Hosts (host[:port], or an https origin) besides the API's own that may receive "
            "the provider token as toolbox proxies; blank uses DAYTONA_TOOLBOX_HOSTS."
        ),
    )

    # The price table (docs/rules.md, what a kept sandbox costs): what a kept
    # sandbox costs here, by the
    # sizes the provider reports. Blank is "no price": its cost shows as unknown.
    price_currency = models.CharField(max_length=3, default="USD")
    price_vcpu_hour_running = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Per vCPU-hour, started."
    )
    price_memory_gib_hour_running = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Per GiB-hour, started."
    )
    price_disk_gib_month_running = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Per GiB-month, started."
    )
    price_vcpu_hour_stopped = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Per vCPU-hour, stopped."
    )
    price_memory_gib_hour_stopped = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Per GiB-hour, stopped."
    )
    price_disk_gib_month_stopped = models.DecimalField(
        max_digits=12, decimal_places=6, null=True, blank=True, help_text="Per GiB-month, stopped."
    )

    objects = ScopedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        permissions = [("edit_policy", "Can edit an environment's retirement policy")]
        constraints = [
            enum_check("driver", EnvironmentDriver, model="environment"),
            provider_named("environment"),
            enum_check("status", EnvironmentStatus, model="environment"),
            enum_check("retirement_mode", RetirementMode, model="environment"),
            models.CheckConstraint(
                condition=Q(max_retirements_per_pass__gte=0), name="environment_cap_nonnegative"
            ),
            *[
                models.CheckConstraint(
                    condition=Q(**{f"{name}__isnull": True}) | Q(**{f"{name}__gte": 0}),
                    name=f"environment_{name}_nonnegative",
                )
                for name in PRICE_FIELDS
            ],
            # A window is set whole or not at all (any time).
            models.CheckConstraint(
                condition=(
                    Q(time_zone="", window_days="", window_start=None, window_end=None)
                    | (
                        ~Q(time_zone="")
                        & ~Q(window_days="")
                        & Q(window_start__isnull=False, window_end__isnull=False)
                    )
                ),
                name="environment_window_whole",
            ),
            models.CheckConstraint(
                condition=Q(window_days__regex=STORED_DAYS_PATTERN),
                name="environment_window_days",
            ),
        ]

    def __str__(self):
        return self.name

    def policy(self) -> dict:
        """The console's policy for this environment, as audit rows record it."""
        return {
            "retirement_mode": self.retirement_mode,
            "warm_retention_hours": self.warm_retention.total_seconds() / 3600,
            "max_retirements_per_pass": self.max_retirements_per_pass,
            "workspace_root": self.workspace_root,
            "notice_hours": self.notice_period.total_seconds() / 3600,
            "retirement_window": self.window.describe() if self.window else "any time",
        }

    @property
    def window(self) -> Window | None:
        """The retirement window (None: any time)."""
        return stored_window(self.time_zone, self.window_days, self.window_start, self.window_end)

    def set_window(self, window: Window | None) -> None:
        """Set the retirement window (None: any time); the caller saves."""
        self.time_zone = window.time_zone if window else ""
        self.window_days = stored_days(window.days) if window else ""
        self.window_start = window.start if window else None
        self.window_end = window.end if window else None

    def provider_client(self, provider: str = "") -> Provider:
        """The shared client for `provider` (blank: this environment's) with this
        environment's API settings (docs/rules.md, what happens next)."""
        return get_provider(
            provider or self.provider,
            api_url=self.api_url or None,
            api_key_env=self.api_key_env or "DAYTONA_API_KEY",
            toolbox_hosts=self.toolbox_hosts,
        )


class IssueQuerySet(ScopedQuerySet):
    def with_people(self):
        """The issues with the users and agent their owner is read from
        (`Issue.owner`): one query, whatever the number of issues."""
        return self.select_related("assignee_user", "assignee_agent", "created_by_user")


# The users an issue's owner may be read from (`Issue.owner`), for a query
# that reaches issues through another row: `"lease__issue__" + path`.
ISSUE_PEOPLE = ("assignee_user", "assignee_agent", "created_by_user")


class Issue(MirroredModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    key = models.CharField(max_length=64, blank=True, db_index=True)
    title = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=16, choices=IssueStatus.choices, default=IssueStatus.TODO)
    bound_workspace = models.ForeignKey(
        "ExecutionWorkspace",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="bound_issues",
    )
    # Paperclip's issues.assignee_user_id, assignee_agent_id, created_by_user_id
    # (docs/rules.md, the people around a sandbox).
    assignee_user = models.ForeignKey(
        "PaperclipUser",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="assigned_issues",
    )
    assignee_agent = models.ForeignKey(
        "Agent", null=True, blank=True, on_delete=models.PROTECT, related_name="assigned_issues"
    )
    created_by_user = models.ForeignKey(
        "PaperclipUser",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="created_issues",
    )

    objects = IssueQuerySet.as_manager()

    class Meta:
        constraints = [enum_check("status", IssueStatus, model="issue")]

    def __str__(self):
        return self.key or str(self.id)

    def owner(self) -> Owner | None:
        """The task's owner with the name and e-mail address Paperclip holds
        (`sandboxes/rules/owner.py:task_owner`). Reads the users from the rows
        `Issue.objects.with_people()` (or `ISSUE_PEOPLE`) already joined."""
        found = task_owner(self.assignee_user_id, self.assignee_agent_id, self.created_by_user_id)
        if found is None:
            return None
        user = self.assignee_user if found.owned_as is OwnedAs.ASSIGNEE else self.created_by_user
        if user is None:  # pragma: no cover - the foreign key makes it exist
            return found
        return replace(found, name=user.name, email=user.email)


class ExecutionWorkspace(MirroredModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    issue = models.ForeignKey(Issue, null=True, on_delete=models.PROTECT, related_name="workspaces")
    status = models.CharField(max_length=32, default="active")
    save_state = models.CharField(
        max_length=16, choices=SaveState.choices, default=SaveState.STARTING
    )
    saved_at = models.DateTimeField(null=True, blank=True)
    final_checkpoint_at = models.DateTimeField(null=True, blank=True)
    saved_manifest = models.JSONField(
        default=dict, blank=True, help_text="path → {sha256, size} of the last committed save."
    )
    writer_run = models.ForeignKey(
        "HeartbeatRun", models.SET_NULL, null=True, blank=True, related_name="held_workspaces"
    )

    class Meta:
        constraints = [enum_check("save_state", SaveState, model="workspace")]

    def __str__(self):
        return f"workspace {self.id}"


class HeartbeatRun(MirroredModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    # Not indexed on its own: run_issue_status leads with it (migration 0031).
    issue = models.ForeignKey(Issue, models.PROTECT, null=True, related_name="runs", db_index=False)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [enum_check("status", RunStatus, model="run")]
        indexes = [
            models.Index(fields=["issue", "status"], name="run_issue_status"),
            # Live runs are few among a year of finished ones (`issue_run_active`).
            models.Index(
                fields=["issue"], condition=Q(status__in=RUN_LIVE), name="run_live_by_issue"
            ),
        ]

    def __str__(self):
        return f"run {self.id}"


class EnvironmentLease(MirroredModel):
    placeholder_defaults = {"status": "active", "lease_policy": "ephemeral", "provider": "local"}

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    environment = models.ForeignKey(
        Environment, null=True, on_delete=models.PROTECT, related_name="leases"
    )
    execution_workspace = models.ForeignKey(
        ExecutionWorkspace, null=True, blank=True, on_delete=models.PROTECT, related_name="leases"
    )
    # Not indexed on its own: lease_issue_status leads with it (migration 0031).
    issue = models.ForeignKey(
        Issue, models.PROTECT, null=True, blank=True, related_name="leases", db_index=False
    )
    heartbeat_run = models.ForeignKey(
        HeartbeatRun, null=True, blank=True, on_delete=models.PROTECT, related_name="leases"
    )
    status = models.CharField(max_length=16, choices=LeaseStatus.choices)
    lease_policy = models.CharField(max_length=32, choices=LeasePolicy.choices)
    provider = models.CharField(max_length=64, help_text="Paperclip's provider key, any provider.")
    provider_lease_id = models.CharField(max_length=200)
    acquired_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.CharField(max_length=200, blank=True)
    cleanup_status = models.CharField(
        max_length=16, choices=CleanupStatus.choices, null=True, blank=True
    )
    disposition = models.CharField(
        max_length=16, choices=Disposition.choices, null=True, blank=True
    )
    metadata = models.JSONField(default=dict, blank=True)
    # Maintained by the database (triggers, migration 0009) in the writing
    # transaction, whoever writes: ingest, the mirror, the console, raw SQL.
    superseded = models.BooleanField(
        default=False,
        editable=False,
        help_text="Another row on the same sandbox has a later acquired_at: this row is "
        "history, never the one judged. Maintained by the database.",
    )

    class Meta:
        constraints = [
            enum_check("status", LeaseStatus, model="lease"),
            enum_check("lease_policy", LeasePolicy, model="lease"),
            provider_named("lease"),
            enum_check("cleanup_status", CleanupStatus, model="lease", nullable=True),
            enum_check("disposition", Disposition, model="lease", nullable=True),
        ]
        indexes = [
            # Newest lease row per sandbox.
            models.Index(
                fields=["provider", "provider_lease_id", "-acquired_at"],
                name="lease_sandbox_newest",
            ),
            # The rows a listing can judge: not superseded, in a status some
            # candidate kind needs. History (expired, superseded) is never read.
            models.Index(
                fields=["environment"],
                condition=Q(superseded=False, status__in=KEEPABLE_STATUSES),
                name="lease_keepable",
            ),
            # Rows that share their sandbox (`sandbox_shared`): few among history.
            models.Index(
                fields=["provider", "provider_lease_id"],
                condition=Q(status__in=SHARING_STATUSES),
                name="lease_sharing",
            ),
            models.Index(fields=["status", "lease_policy"], name="lease_status_policy"),
            models.Index(fields=["issue", "status"], name="lease_issue_status"),
        ]

    def __str__(self):
        return f"{self.provider}:{self.provider_lease_id} ({self.status})"


class LeaseIntent(MirroredModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    lease = models.ForeignKey(EnvironmentLease, on_delete=models.PROTECT, related_name="intents")
    kind = models.CharField(max_length=32, choices=IntentKind.choices)
    state = models.CharField(max_length=16, choices=IntentState.choices)
    request_id = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            enum_check("kind", IntentKind, model="intent"),
            enum_check("state", IntentState, model="intent"),
        ]
        indexes = [
            models.Index(
                fields=["lease"], condition=Q(state="pending"), name="intent_pending_by_lease"
            )
        ]

    def __str__(self):
        return f"{self.kind} intent ({self.state})"


class PendingExport(MirroredModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    lease = models.ForeignKey(EnvironmentLease, on_delete=models.PROTECT, related_name="exports")
    state = models.CharField(max_length=16, choices=ExportState.choices)

    class Meta:
        constraints = [enum_check("state", ExportState, model="export")]
        indexes = [
            models.Index(
                fields=["lease"], condition=Q(state="pending"), name="export_pending_by_lease"
            )
        ]

    def __str__(self):
        return f"export {self.id} ({self.state})"


class RecoveryAction(MirroredModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    source_issue = models.ForeignKey(
        Issue, on_delete=models.PROTECT, related_name="recovery_actions"
    )
    kind = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=RecoveryStatus.choices)
    outcome = models.CharField(max_length=200, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    lease = models.ForeignKey(
        EnvironmentLease,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="recovery_actions",
        help_text="The restore-source lease the evidence names, when it names one.",
        db_index=False,  # recovery_lease_status leads with it (migration 0031)
    )

    class Meta:
        constraints = [enum_check("status", RecoveryStatus, model="recovery")]
        indexes = [
            models.Index(
                fields=["source_issue"],
                condition=Q(status__in=["active", "escalated"]),
                name="recovery_open_by_issue",
            ),
            models.Index(fields=["lease", "status"], name="recovery_lease_status"),
        ]

    def __str__(self):
        return f"{self.kind} ({self.status})"
