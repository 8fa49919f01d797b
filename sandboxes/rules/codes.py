"""The closed sets the rules decide with, as plain StrEnums.

The models store the same values as Django TextChoices
(`sandboxes/models/choices.py`), which the rules cannot import: importing a
model module needs the app registry. A member here equals the stored string and
the TextChoices member of the same value, so the rules judge rows as read, and
what they return is written as is. `tests/rules/test_codes.py` checks that the
two agree, value for value and in order.
"""

from enum import StrEnum


class HoldCode(StrEnum):
    """Every reason a candidate waits, in display order (docs/rules.md, holds)."""

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
    # Hold-like: the environment's retirement window is closed (sandboxes/rules/window.py).
    OUTSIDE_WINDOW = "outside_window"


class RetirementKind(StrEnum):
    ABANDONED_WARM = "abandoned_warm"
    SUPERSEDED_RUNNING_WARM = "superseded_running_warm"
    CLOSED_RESTORE_SOURCE = "closed_restore_source"
    DONE_TASK_WARM = "done_task_warm"
    RESUME_FAILED = "resume_failed"
    STOP_AFTER_UNSUCCESSFUL_RUN = "stop_after_unsuccessful_run"


class RetirementMode(StrEnum):
    OBSERVE = "observe"
    MANUAL = "manual"
    AUTO = "auto"


class Stage(StrEnum):
    LISTED = "listed"
    COMPARING = "comparing"
    EXPORTING = "exporting"
    RETIRING = "retiring"
    RETIRED = "retired"
    HELD = "held"
    AWAITING_APPROVAL = "awaiting_approval"
    NOTICED = "noticed"
    FAILED = "failed"
    DISMISSED = "dismissed"
    CORRECTED = "corrected"


STAGES_CLOSED = (Stage.RETIRED, Stage.DISMISSED, Stage.CORRECTED)


class ReceiptKind(StrEnum):
    TERMINATION = "termination"
    STOP_AND_RETAIN = "stop_and_retain"
    SALVAGE_COMPARE = "salvage_compare"
    SALVAGE_EXPORT = "salvage_export"
    RETIREMENT = "retirement"
    APPROVAL = "approval"
    OPERATOR_ATTESTED = "operator_attested"
    # The export attached to the Paperclip task and read back (sandboxes/paperclip/).
    PAPERCLIP_ATTACHMENT = "paperclip_attachment"


class LeaseStatus(StrEnum):
    ACTIVE = "active"
    RELEASED = "released"
    EXPIRED = "expired"
    FAILED = "failed"
    RETAINED = "retained"
    PENDING_CLEANUP = "pending_cleanup"


class SaveState(StrEnum):
    STARTING = "starting"
    SAVING = "saving"
    SAVED = "saved"
    FAILED = "failed"


class Disposition(StrEnum):
    KEEP_RUNNING = "keep_running"
    STOP_AND_RETAIN = "stop_and_retain"
    DESTROY = "destroy"


# A run still live (queued, retrying or running) and a task that is over.
RUN_LIVE = ("queued", "scheduled_retry", "running")
ISSUE_CLOSED = ("done", "cancelled")
