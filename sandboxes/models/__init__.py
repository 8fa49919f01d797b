"""Models: Paperclip's mirrored rows and the console's own records."""

from .choices import *  # noqa: F403
from .console import (
    ApiToken,
    AppendOnlyError,
    AppendOnlyModel,
    Attachment,
    AuditEvent,
    IngestedEvent,
    Receipt,
    ReconcilerPass,
    Retirement,
    hash_token,
)
from .mirror import (
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    Issue,
    LeaseIntent,
    PendingExport,
    RecoveryAction,
)

__all__ = [
    "AppendOnlyError",
    "AppendOnlyModel",
    "ApiToken",
    "Attachment",
    "AuditEvent",
    "Environment",
    "EnvironmentLease",
    "ExecutionWorkspace",
    "HeartbeatRun",
    "IngestedEvent",
    "Issue",
    "LeaseIntent",
    "PendingExport",
    "ReconcilerPass",
    "Receipt",
    "RecoveryAction",
    "Retirement",
    "hash_token",
]
