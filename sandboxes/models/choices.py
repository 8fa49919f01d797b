"""Enumerations mirrored from Paperclip (same names, same values) and the console's own."""

from django.db import models
from django.db.models import Q


class EnvironmentDriver(models.TextChoices):
    LOCAL = "local"
    SSH = "ssh"
    SANDBOX = "sandbox"
    PLUGIN = "plugin"


class ProviderName(models.TextChoices):
    DAYTONA = "daytona"
    LOCAL = "local"


class EnvironmentStatus(models.TextChoices):
    ACTIVE = "active"
    ARCHIVED = "archived"


class RetirementMode(models.TextChoices):
    OBSERVE = "observe"
    MANUAL = "manual"
    AUTO = "auto"


class IssueStatus(models.TextChoices):
    BACKLOG = "backlog"
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    IN_REVIEW = "in_review"
    BLOCKED = "blocked"
    DONE = "done"
    CANCELLED = "cancelled"


ISSUE_CLOSED = (IssueStatus.DONE, IssueStatus.CANCELLED)


class SaveState(models.TextChoices):
    STARTING = "starting"
    SAVING = "saving"
    SAVED = "saved"
    FAILED = "failed"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    SCHEDULED_RETRY = "scheduled_retry"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


RUN_LIVE = (RunStatus.QUEUED, RunStatus.SCHEDULED_RETRY, RunStatus.RUNNING)
RUN_TERMINAL = tuple(s for s in RunStatus if s not in RUN_LIVE)
RUN_UNSUCCESSFUL = (
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.TIMED_OUT,
    RunStatus.INTERRUPTED,
)


class LeaseStatus(models.TextChoices):
    ACTIVE = "active"
    RELEASED = "released"
    EXPIRED = "expired"
    FAILED = "failed"
    RETAINED = "retained"
    PENDING_CLEANUP = "pending_cleanup"


class LeasePolicy(models.TextChoices):
    EPHEMERAL = "ephemeral"
    REUSE_BY_ENVIRONMENT = "reuse_by_environment"
    REUSE_BY_EXECUTION_WORKSPACE = "reuse_by_execution_workspace"
    RETAIN_ON_FAILURE = "retain_on_failure"


# Every lease status some candidate kind needs (docs/rules.md, candidate kinds): `active` and
# `expired` rows are never candidates, so listing reads only these.
KEEPABLE_STATUSES = (
    LeaseStatus.RELEASED,
    LeaseStatus.FAILED,
    LeaseStatus.RETAINED,
    LeaseStatus.PENDING_CLEANUP,
)
# A sandbox is shared while another of its rows is in one of these (`sandbox_shared`).
SHARING_STATUSES = (LeaseStatus.ACTIVE, LeaseStatus.RETAINED, LeaseStatus.PENDING_CLEANUP)

WARM_POLICIES = (LeasePolicy.REUSE_BY_ENVIRONMENT, LeasePolicy.REUSE_BY_EXECUTION_WORKSPACE)


class CleanupStatus(models.TextChoices):
    PENDING = "pending"
    SUCCESS = "success"
    FAILED = "failed"


class Disposition(models.TextChoices):
    KEEP_RUNNING = "keep_running"
    STOP_AND_RETAIN = "stop_and_retain"
    DESTROY = "destroy"


class ReceiptKind(models.TextChoices):
    TERMINATION = "termination"
    STOP_AND_RETAIN = "stop_and_retain"
    SALVAGE_COMPARE = "salvage_compare"
    SALVAGE_EXPORT = "salvage_export"
    RETIREMENT = "retirement"
    APPROVAL = "approval"
    OPERATOR_ATTESTED = "operator_attested"
    # The export attached to the Paperclip task and read back (sandboxes/paperclip/).
    PAPERCLIP_ATTACHMENT = "paperclip_attachment"


class UploadStatus(models.TextChoices):
    """A verified export's attachment to the Paperclip task (models/uploads.py)."""

    PENDING = "pending"  # not tried yet, or waiting for the task's company
    ATTACHED = "attached"  # every part attached and read back: a receipt says so
    REFUSED = "refused"  # Paperclip refused or could not be reached: retried


PROVIDER_RECEIPT_KINDS = (ReceiptKind.TERMINATION, ReceiptKind.STOP_AND_RETAIN)

RECEIPT_SCHEMAS: dict[str, str] = {
    ReceiptKind.TERMINATION: "paperclip.remote-termination.v1",
    ReceiptKind.STOP_AND_RETAIN: "paperclip.sandbox-stop-and-retain-receipt.v1",
}


class TerminationState(models.TextChoices):
    STOPPED = "stopped"
    DESTROYED = "destroyed"


class IntentKind(models.TextChoices):
    STOP_AND_RETAIN = "stop_and_retain"
    EXPORT_RESUME = "export_resume"
    RESTORE = "restore"


class IntentState(models.TextChoices):
    PENDING = "pending"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ExportState(models.TextChoices):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class RecoveryStatus(models.TextChoices):
    ACTIVE = "active"
    ESCALATED = "escalated"
    RESOLVED = "resolved"
    CANCELLED = "cancelled"


RECOVERY_OPEN = (RecoveryStatus.ACTIVE, RecoveryStatus.ESCALATED)


class RetirementKind(models.TextChoices):
    ABANDONED_WARM = "abandoned_warm"
    SUPERSEDED_RUNNING_WARM = "superseded_running_warm"
    CLOSED_RESTORE_SOURCE = "closed_restore_source"
    DONE_TASK_WARM = "done_task_warm"
    RESUME_FAILED = "resume_failed"
    # A correction, not a retirement: stop and retain, never destroy (seed 002).
    STOP_AFTER_UNSUCCESSFUL_RUN = "stop_after_unsuccessful_run"


class Stage(models.TextChoices):
    LISTED = "listed"
    COMPARING = "comparing"
    EXPORTING = "exporting"
    RETIRING = "retiring"
    RETIRED = "retired"
    HELD = "held"
    AWAITING_APPROVAL = "awaiting_approval"
    # Auto mode with a notice period: the owner was told; retired after retire_after.
    NOTICED = "noticed"
    FAILED = "failed"
    DISMISSED = "dismissed"
    # A correction's record once its stop is confirmed (docs/rules.md, proof): closed,
    # never a retirement and never a dismissal.
    CORRECTED = "corrected"


STAGES_CLOSED = (Stage.RETIRED, Stage.DISMISSED, Stage.CORRECTED)
# Stages a reconciler worker may pick up once next_attempt_at is due. `held`
# records are released by the listing sync once their holds clear.
WORKABLE_STAGES = (
    Stage.LISTED,
    Stage.COMPARING,
    Stage.EXPORTING,
    Stage.RETIRING,
    Stage.AWAITING_APPROVAL,
    Stage.NOTICED,
    Stage.FAILED,
)


class HoldCode(models.TextChoices):
    RUN_ACTIVE = "run_active"
    ISSUE_RUN_ACTIVE = "issue_run_active"
    RECOVERY_OPEN = "recovery_open"
    EXPORT_PENDING = "export_pending"
    INTENT_PENDING = "intent_pending"
    SANDBOX_SHARED = "sandbox_shared"
    NEWER_LEASE = "newer_lease"
    NO_STOP_RECEIPT = "no_stop_receipt"
    TASK_CAN_RESUME = "task_can_resume"
    WRITER_ACTIVE = "writer_active"
    RETENTION = "retention"
    UNKNOWN_AGE = "unknown_age"
    OPERATOR_HOLD = "operator_hold"
    PROVIDER_UNSUPPORTED = "provider_unsupported"
    OUTSIDE_WINDOW = "outside_window"


class TokenScope(models.TextChoices):
    INGEST = "ingest"
    OPERATOR = "operator"
    # Reads the API (the list, a sandbox, its salvage) and acts on nothing.
    REVIEWER = "reviewer"


def enum_check(field: str, choices: type[models.TextChoices], *, model: str, nullable=False):
    """A CHECK constraint that keeps `field` inside `choices` (and NULL if allowed)."""
    condition = Q(**{f"{field}__in": choices.values})
    if nullable:
        condition |= Q(**{f"{field}__isnull": True})
    return models.CheckConstraint(condition=condition, name=f"{model}_{field}_valid")
