"""factory-boy factories that build consistent graphs: a lease comes with its
environment, task, workspace and run, all pointing at each other."""

import hashlib
import uuid
from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone
from factory.django import DjangoModelFactory

from sandboxes import models as m


class UserFactory(DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("correct horse battery staple")

    @factory.post_generation
    def groups(self, create, extracted, **kwargs):
        from django.contrib.auth.models import Group

        for name in extracted or ():
            self.groups.add(Group.objects.get(name=name))


class EnvironmentFactory(DjangoModelFactory):
    class Meta:
        model = m.Environment

    name = factory.Sequence(lambda n: f"env-{n}")
    provider = m.ProviderName.LOCAL
    driver = m.EnvironmentDriver.SANDBOX
    retirement_mode = m.RetirementMode.AUTO


class IssueFactory(DjangoModelFactory):
    class Meta:
        model = m.Issue

    key = factory.Sequence(lambda n: f"PAP-{n + 100}")
    title = factory.Faker("sentence", nb_words=5)
    status = m.IssueStatus.IN_PROGRESS


class HeartbeatRunFactory(DjangoModelFactory):
    class Meta:
        model = m.HeartbeatRun

    issue = factory.SubFactory(IssueFactory)
    status = m.RunStatus.SUCCEEDED
    started_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=3))
    finished_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=2))


def manifest_for(files: dict[str, bytes]) -> dict:
    return {
        path: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        for path, data in files.items()
    }


class ExecutionWorkspaceFactory(DjangoModelFactory):
    class Meta:
        model = m.ExecutionWorkspace

    issue = factory.SubFactory(IssueFactory)
    save_state = m.SaveState.SAVED
    saved_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=2))
    final_checkpoint_at = factory.LazyAttribute(lambda o: o.saved_at)
    saved_manifest = factory.LazyFunction(lambda: manifest_for({"README.md": b"# task\n"}))


class EnvironmentLeaseFactory(DjangoModelFactory):
    """A warm lease whose task, workspace and run agree, bound to the task."""

    class Meta:
        model = m.EnvironmentLease
        skip_postgeneration_save = True

    environment = factory.SubFactory(EnvironmentFactory)
    issue = factory.SubFactory(IssueFactory)
    execution_workspace = factory.SubFactory(
        ExecutionWorkspaceFactory, issue=factory.SelfAttribute("..issue")
    )
    heartbeat_run = factory.SubFactory(HeartbeatRunFactory, issue=factory.SelfAttribute("..issue"))
    status = m.LeaseStatus.RELEASED
    lease_policy = m.LeasePolicy.REUSE_BY_ENVIRONMENT
    provider = factory.SelfAttribute("environment.provider")
    provider_lease_id = factory.Sequence(lambda n: f"sbx-{n:06d}")
    acquired_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=3))
    last_used_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=2))
    released_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=2))
    disposition = m.Disposition.STOP_AND_RETAIN
    metadata = factory.LazyFunction(dict)

    @factory.post_generation
    def bind(self, create, extracted, **kwargs):
        """bind=True (default) binds the task to this lease's workspace."""
        if extracted is False or self.issue is None:
            return
        if self.issue.bound_workspace_id is None:
            self.issue.bound_workspace = self.execution_workspace
            if create:
                self.issue.save(update_fields=["bound_workspace"])


class ReceiptFactory(DjangoModelFactory):
    class Meta:
        model = m.Receipt

    lease = factory.SubFactory(EnvironmentLeaseFactory)
    run = factory.SelfAttribute("lease.heartbeat_run")
    kind = m.ReceiptKind.TERMINATION
    state = m.TerminationState.STOPPED
    schema = factory.LazyAttribute(lambda o: m.RECEIPT_SCHEMAS.get(o.kind, ""))
    provider_lease_id = factory.SelfAttribute("lease.provider_lease_id")
    confirmed_at = factory.LazyFunction(timezone.now)
    request_id = factory.Faker("uuid4")
    payload = factory.LazyFunction(dict)
    actor = "paperclip"

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        """A proof or approval receipt is bound to what its record's sandbox is at
        the moment it is written, as the console writes it (DOMAIN §2.3); pass
        `payload={"fingerprint": ...}` to write another one (None: no fingerprint)."""
        retirement, kind = kwargs.get("retirement"), kwargs.get("kind")
        payload = dict(kwargs.get("payload") or {})
        if retirement is not None and kind in BOUND_KINDS and "fingerprint" not in payload:
            from sandboxes.proof import fingerprint_of, proof_for

            payload["fingerprint"] = fingerprint_of(retirement)
            if kind == m.ReceiptKind.APPROVAL and "proof_receipt_id" not in payload:
                proof = proof_for(retirement)
                if proof.receipt is not None:
                    payload["proof_receipt_id"] = str(proof.receipt.pk)
        kwargs["payload"] = payload
        return super()._create(model_class, *args, **kwargs)


BOUND_KINDS = (
    m.ReceiptKind.SALVAGE_COMPARE,
    m.ReceiptKind.SALVAGE_EXPORT,
    m.ReceiptKind.OPERATOR_ATTESTED,
    m.ReceiptKind.APPROVAL,
)


class LeaseIntentFactory(DjangoModelFactory):
    class Meta:
        model = m.LeaseIntent

    lease = factory.SubFactory(EnvironmentLeaseFactory)
    kind = m.IntentKind.STOP_AND_RETAIN
    state = m.IntentState.PENDING
    request_id = factory.Faker("uuid4")


class PendingExportFactory(DjangoModelFactory):
    class Meta:
        model = m.PendingExport

    lease = factory.SubFactory(EnvironmentLeaseFactory)
    state = m.ExportState.PENDING


class RecoveryActionFactory(DjangoModelFactory):
    class Meta:
        model = m.RecoveryAction

    lease = factory.SubFactory(
        EnvironmentLeaseFactory, lease_policy=m.LeasePolicy.RETAIN_ON_FAILURE
    )
    source_issue = factory.SelfAttribute("lease.issue")
    kind = "workspace_restore"
    status = m.RecoveryStatus.ACTIVE
    evidence = factory.LazyAttribute(lambda o: {"leaseId": str(o.lease.pk)})


class RetirementFactory(DjangoModelFactory):
    class Meta:
        model = m.Retirement

    lease = factory.SubFactory(EnvironmentLeaseFactory)
    environment = factory.SelfAttribute("lease.environment")
    provider = factory.SelfAttribute("lease.provider")
    provider_lease_id = factory.SelfAttribute("lease.provider_lease_id")
    kind = m.RetirementKind.ABANDONED_WARM
    stage = m.Stage.LISTED


class PaperclipUploadFactory(DjangoModelFactory):
    """An export's attachment to the Paperclip task, with both of its receipts
    (so every status, `attached` too, is admitted)."""

    class Meta:
        model = m.PaperclipUpload

    retirement = factory.SubFactory(RetirementFactory)
    export_receipt = factory.SubFactory(
        ReceiptFactory,
        lease=factory.SelfAttribute("..retirement.lease"),
        retirement=factory.SelfAttribute("..retirement"),
        kind=m.ReceiptKind.SALVAGE_EXPORT,
        state=None,
        payload={"verified": True, "files": [], "deleted": []},
    )
    receipt = factory.SubFactory(
        ReceiptFactory,
        lease=factory.SelfAttribute("..retirement.lease"),
        retirement=factory.SelfAttribute("..retirement"),
        kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT,
        state=None,
    )
    issue_id = factory.LazyAttribute(lambda o: o.retirement.lease.issue_id)
    next_attempt_at = factory.LazyFunction(timezone.now)


class AttachmentFactory(DjangoModelFactory):
    class Meta:
        model = m.Attachment

    issue = factory.SubFactory(IssueFactory)
    path = factory.Sequence(lambda n: f"notes/file-{n}.txt")
    sha256 = factory.LazyAttribute(lambda o: hashlib.sha256(o.path.encode()).hexdigest())
    size = 10
    file = factory.LazyAttribute(lambda o: m.Attachment.storage_name(o.sha256))


class AuditEventFactory(DjangoModelFactory):
    class Meta:
        model = m.AuditEvent

    actor_label = "system"
    action = "retirement.hold"
    object_type = "retirement"
    object_id = factory.Faker("uuid4")
    reason = "testing"


class ApiTokenFactory(DjangoModelFactory):
    class Meta:
        model = m.ApiToken

    name = factory.Sequence(lambda n: f"token-{n}")
    scope = m.TokenScope.INGEST
    token_hash = factory.Sequence(lambda n: hashlib.sha256(f"raw-{n}".encode()).hexdigest())
    prefix = "pcc_xxxxxx"


class ReconcilerPassFactory(DjangoModelFactory):
    class Meta:
        model = m.ReconcilerPass

    started_at = factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=5))
    finished_at = factory.LazyFunction(timezone.now)


# --- reconciler graphs (issue 4) ---------------------------------------------


def stop_receipt(lease, *, kind=m.ReceiptKind.TERMINATION, run=None, **kwargs):
    """A confirmed stop for this lease and its run, as Paperclip records it: with
    the receipt, Paperclip settles the lease's cleanup (cleanup_status success;
    remote-execution-termination.ts @ 555fcfc, hasRemoteTerminationReceipt
    lines 29-30), so its predicate confirms it. What a test made of the lease's
    status and released_at stays: a lease active, retained or never released is
    refused, as Paperclip's predicate refuses it."""
    changed = []
    if lease.cleanup_status != m.CleanupStatus.SUCCESS:
        lease.cleanup_status = m.CleanupStatus.SUCCESS
        changed.append("cleanup_status")
    if changed:
        m.EnvironmentLease.objects.filter(pk=lease.pk).update(
            **{name: getattr(lease, name) for name in changed}
        )
    return ReceiptFactory(
        lease=lease,
        run=run if run is not None else lease.heartbeat_run,
        kind=kind,
        state=m.TerminationState.STOPPED,
        **kwargs,
    )


def stop_and_retain(lease, **kwargs):
    """Paperclip's settled stop-only cleanup: a termination receipt (stopped) and
    a stop-and-retain receipt confirmed at the same moment, within the lease's
    [acquired_at, released_at] (sandbox-stop-and-retain.ts @ c5df623,
    settleStopOnlyCleanup lines 98-128; hasConfirmedSandboxStopAndRetain 33-35)."""
    at = kwargs.pop("confirmed_at", None) or lease.released_at or timezone.now()
    return (
        stop_receipt(lease, confirmed_at=at, **kwargs),
        stop_receipt(lease, kind=m.ReceiptKind.STOP_AND_RETAIN, confirmed_at=at, **kwargs),
    )


def rebind_to_new_workspace(lease):
    """A Retry bound the task to a fresh workspace (seed 001, wave t05)."""
    fresh = ExecutionWorkspaceFactory(issue=lease.issue)
    lease.issue.bound_workspace = fresh
    lease.issue.save(update_fields=["bound_workspace"])
    return fresh


class NotificationChannelFactory(DjangoModelFactory):
    class Meta:
        model = m.NotificationChannel

    environment = factory.SubFactory(EnvironmentFactory)
    name = factory.Sequence(lambda n: f"channel-{n}")
    kind = "webhook"
    url_env = "TEST_WEBHOOK_URL"


class NotificationEventFactory(DjangoModelFactory):
    class Meta:
        model = m.NotificationEvent

    type = m.NotificationType.TEST
    key = factory.Sequence(lambda n: f"test:{n}")
    environment = factory.SubFactory(EnvironmentFactory)


class NotificationDeliveryFactory(DjangoModelFactory):
    class Meta:
        model = m.NotificationDelivery

    event = factory.SubFactory(NotificationEventFactory)
    channel = factory.SubFactory(
        NotificationChannelFactory, environment=factory.SelfAttribute("..event.environment")
    )


class OwnerDigestFactory(DjangoModelFactory):
    class Meta:
        model = m.OwnerDigest

    environment = factory.SubFactory(EnvironmentFactory)
    owner_user_id = factory.Sequence(lambda n: f"user-{n}")
    owner_email = factory.LazyAttribute(lambda o: f"{o.owner_user_id}@example.com")
    hour = factory.LazyFunction(lambda: timezone.now().replace(minute=0, second=0, microsecond=0))


def salvage_export(
    retirement, files: dict[str, bytes], *, deleted=(), confirmed_at=None, **payload
):
    """A verified salvage_export receipt of `retirement` holding `files`, stored
    content-addressed as an export stores them (sandboxes/content_store.py)."""
    import io

    from django.core.files.storage import default_storage

    from sandboxes import content_store

    entries = []
    for path, body in files.items():
        digest = hashlib.sha256(body).hexdigest()
        name = m.Attachment.storage_name(digest)
        content_store.put_verified(default_storage, name, io.BytesIO(body), digest, len(body))
        entries.append({"path": path, "size": len(body), "sha256": digest, "storage": name})
    return ReceiptFactory(
        kind=m.ReceiptKind.SALVAGE_EXPORT,
        state=None,
        lease=retirement.lease,
        run=retirement.lease.heartbeat_run,
        retirement=retirement,
        provider_lease_id=retirement.provider_lease_id,
        actor="system",
        confirmed_at=confirmed_at or timezone.now(),
        payload={
            "verified": True,
            "files": entries,
            "deleted": list(deleted),
            "bytes": sum(e["size"] for e in entries),
            **payload,
        },
    )


def hold_until(days: float = 1):
    """A valid end for an operator's hold (operators must give one, at most 90 days)."""
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() + timedelta(days=days)


class CompanyFactory(DjangoModelFactory):
    class Meta:
        model = m.Company

    id = factory.LazyFunction(uuid.uuid4)
    name = factory.Sequence(lambda n: f"Company {n}")
    company_id = factory.SelfAttribute("id")


def move_to_company(company, *records) -> None:
    """Put each record's sandbox graph (lease, task, environment, workspace, run
    and receipts) in `company`, as Paperclip's rows would be (README, company scope)."""
    for r in records:
        lease = r.lease if isinstance(r, m.Retirement) else r
        rows = [
            (m.EnvironmentLease, lease.pk),
            (m.Environment, lease.environment_id),
            (m.Issue, lease.issue_id),
            (m.ExecutionWorkspace, lease.execution_workspace_id),
            (m.HeartbeatRun, lease.heartbeat_run_id),
        ]
        for model, pk in rows:
            if pk is not None:
                model.objects.filter(pk=pk).update(company_id=company.pk)
        lease.company_id = company.pk
        lease.environment.company_id = company.pk
        if lease.issue is not None:
            lease.issue.company_id = company.pk


def limit_to(user, *companies):
    """Limit a console user to `companies` (README, company scope)."""
    for company in companies:
        m.CompanyScope.objects.create(user=user, company=company)
    return user
