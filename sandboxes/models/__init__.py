"""Models: Paperclip's mirrored rows and the console's own records."""

from .choices import *  # noqa: F403
from .console import (
    AppendOnlyError,
    AppendOnlyModel,
    Attachment,
    AuditEvent,
    Receipt,
    Retirement,
)
from .keeps import KeepLinkUse
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
from .notifications import (
    ChannelKind,
    DeliveryStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    NotificationType,
)
from .owner_mail import DigestStatus, OwnerDigest, OwnerDigestItem, OwnerMail
from .passes import ReconcilerPass
from .people import Agent, Company, PaperclipUser
from .scope import CompanyScope, companies_of
from .tokens import ApiToken, IngestedEvent, hash_token
from .uploads import PaperclipUpload

__all__ = [
    "Agent",
    "AppendOnlyError",
    "AppendOnlyModel",
    "ApiToken",
    "Attachment",
    "AuditEvent",
    "ChannelKind",
    "Company",
    "CompanyScope",
    "DeliveryStatus",
    "DigestStatus",
    "Environment",
    "EnvironmentLease",
    "ExecutionWorkspace",
    "HeartbeatRun",
    "IngestedEvent",
    "KeepLinkUse",
    "NotificationChannel",
    "NotificationDelivery",
    "NotificationEvent",
    "NotificationType",
    "Issue",
    "OwnerDigest",
    "OwnerDigestItem",
    "OwnerMail",
    "LeaseIntent",
    "PaperclipUser",
    "PaperclipUpload",
    "PendingExport",
    "ReconcilerPass",
    "Receipt",
    "RecoveryAction",
    "Retirement",
    "companies_of",
    "hash_token",
]
