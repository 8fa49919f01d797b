"""Every enum column has a CHECK constraint that PostgreSQL enforces."""

import pytest
from django.apps import apps
from django.db import IntegrityError, transaction

from sandboxes import models as m
from tests import factories as f

pytestmark = pytest.mark.django_db

FACTORIES = {
    m.Environment: f.EnvironmentFactory,
    m.Issue: f.IssueFactory,
    m.ExecutionWorkspace: f.ExecutionWorkspaceFactory,
    m.HeartbeatRun: f.HeartbeatRunFactory,
    m.EnvironmentLease: f.EnvironmentLeaseFactory,
    m.LeaseIntent: f.LeaseIntentFactory,
    m.PendingExport: f.PendingExportFactory,
    m.RecoveryAction: f.RecoveryActionFactory,
    m.Retirement: f.RetirementFactory,
    m.Receipt: f.ReceiptFactory,
    m.ApiToken: f.ApiTokenFactory,
    m.NotificationChannel: f.NotificationChannelFactory,
    m.NotificationEvent: f.NotificationEventFactory,
    m.NotificationDelivery: f.NotificationDeliveryFactory,
    m.PaperclipUpload: f.PaperclipUploadFactory,
    m.OwnerDigest: f.OwnerDigestFactory,
}


def enum_fields():
    for model in apps.get_app_config("sandboxes").get_models():
        for field in model._meta.concrete_fields:
            if field.choices:
                yield pytest.param(model, field.name, id=f"{model.__name__}.{field.name}")


ENUM_FIELDS = list(enum_fields())


def test_every_enum_field_is_covered():
    # The mirrored model has at least these enums (DOMAIN §1); a new enum
    # without a factory would make the parametrized test below error.
    names = {p.id for p in ENUM_FIELDS}
    assert {
        "Environment.driver",
        "Environment.status",
        "Environment.retirement_mode",
        "Issue.status",
        "ExecutionWorkspace.save_state",
        "HeartbeatRun.status",
        "EnvironmentLease.status",
        "EnvironmentLease.lease_policy",
        "EnvironmentLease.cleanup_status",
        "EnvironmentLease.disposition",
        "Receipt.kind",
        "LeaseIntent.kind",
        "LeaseIntent.state",
        "PendingExport.state",
        "RecoveryAction.status",
        "Retirement.kind",
        "Retirement.stage",
        "ApiToken.scope",
        "PaperclipUpload.status",
    } <= names


@pytest.mark.parametrize(("model", "field"), ENUM_FIELDS)
def test_check_constraint_rejects_a_bad_value(model, field):
    row = FACTORIES[model]()
    if issubclass(model, m.AppendOnlyModel):
        # Append-only rows can't be updated at all; insert a bad one instead.
        bad = FACTORIES[model].build(lease=row.lease, run=row.run, **{field: "bogus"})
        with pytest.raises(IntegrityError, match="valid"), transaction.atomic():
            model.objects.bulk_create([bad])
        return
    with pytest.raises(IntegrityError, match=f"{field}_valid"), transaction.atomic():
        model.objects.filter(pk=row.pk).update(**{field: "bogus"})


@pytest.mark.parametrize(("model", "field"), ENUM_FIELDS)
def test_check_constraint_admits_every_listed_value(model, field):
    row = FACTORIES[model]()
    if issubclass(model, m.AppendOnlyModel):
        return
    for value, _label in model._meta.get_field(field).choices:
        with transaction.atomic():
            model.objects.filter(pk=row.pk).update(**{field: value})


def test_only_one_open_retirement_per_sandbox():
    first = f.RetirementFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        f.RetirementFactory(lease=first.lease)
    m.Retirement.objects.filter(pk=first.pk).update(stage=m.Stage.RETIRED)
    f.RetirementFactory(lease=first.lease)  # a closed one doesn't count


def test_a_claim_needs_a_deadline():
    row = f.RetirementFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        m.Retirement.objects.filter(pk=row.pk).update(
            attempt_id="7d7f1c4e-4b7a-4a57-8e39-4b8a0a3e9d11"
        )


@pytest.mark.parametrize("factory", [f.EnvironmentFactory, f.EnvironmentLeaseFactory])
def test_any_provider_key_is_mirrored_but_never_an_empty_one(factory):
    # DOMAIN §1: the console mirrors every provider Paperclip names (its
    # environment_leases.provider is free text: paperclipai/paperclip
    # packages/db/src/schema/environment_leases.ts) and drives only its own.
    for key in ("ssh", "e2b", "fake", "plugin:acme.sandbox-provider"):
        assert factory(provider=key).provider == key
    with pytest.raises(IntegrityError), transaction.atomic():
        factory(provider="")


def test_an_attached_upload_names_its_receipt():
    row = f.PaperclipUploadFactory(receipt=None, status=m.UploadStatus.REFUSED)
    with pytest.raises(IntegrityError, match="attached_has_receipt"), transaction.atomic():
        m.PaperclipUpload.objects.filter(pk=row.pk).update(status=m.UploadStatus.ATTACHED)
