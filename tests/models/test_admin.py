"""The admin site shows mirrored, append-only and token rows but cannot change them."""

import uuid

import pytest
from django.contrib import admin
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sandboxes import models as m
from tests import factories as f
from tests.factories import ApiTokenFactory, UserFactory

pytestmark = pytest.mark.django_db

READ_ONLY = [
    m.Company,
    m.Agent,
    m.PaperclipUser,
    m.Environment,
    m.Issue,
    m.ExecutionWorkspace,
    m.HeartbeatRun,
    m.EnvironmentLease,
    m.LeaseIntent,
    m.PendingExport,
    m.RecoveryAction,
    m.Receipt,
    m.AuditEvent,
    m.Retirement,
    m.ReconcilerPass,
    m.Attachment,
    m.ApiToken,
]


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda model: model.__name__)
def test_even_a_superuser_cannot_add_change_or_delete(model):
    request = RequestFactory().get("/admin/")
    request.user = UserFactory(username="root", is_superuser=True, is_staff=True)
    model_admin = admin.site._registry[model]
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)


def test_a_revoked_token_cannot_be_unrevoked_through_the_admin(client):
    token = ApiTokenFactory(revoked_at=timezone.now())
    client.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    url = f"/admin/sandboxes/apitoken/{token.pk}/change/"
    assert client.get(url).status_code == 200
    response = client.post(url, {"revoked_at_0": "", "revoked_at_1": ""})
    assert response.status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is not None


# A factory per registered model, making a row with every foreign key that
# list_display shows filled in (the nullable ones too).
ROWS = {
    m.Company: lambda: m.Company.objects.create(pk=uuid.uuid4(), name="Acme"),
    m.Agent: lambda: m.Agent.objects.create(pk=uuid.uuid4(), name="coder"),
    m.PaperclipUser: lambda: m.PaperclipUser.objects.create(
        pk=uuid.uuid4().hex, name="Dana", email="dana@acme.test"
    ),
    m.Environment: f.EnvironmentFactory,
    m.Issue: lambda: f.IssueFactory(bound_workspace=f.ExecutionWorkspaceFactory()),
    m.ExecutionWorkspace: lambda: f.ExecutionWorkspaceFactory(writer_run=f.HeartbeatRunFactory()),
    m.HeartbeatRun: f.HeartbeatRunFactory,
    m.EnvironmentLease: f.EnvironmentLeaseFactory,
    m.LeaseIntent: f.LeaseIntentFactory,
    m.PendingExport: f.PendingExportFactory,
    m.RecoveryAction: lambda: f.RecoveryActionFactory(source_issue=f.IssueFactory()),
    m.Receipt: lambda: f.ReceiptFactory(actor=f.UserFactory()),
    m.AuditEvent: f.AuditEventFactory,
    m.Retirement: f.RetirementFactory,
    m.ReconcilerPass: f.ReconcilerPassFactory,
    m.Attachment: f.AttachmentFactory,
    m.ApiToken: f.ApiTokenFactory,
}


def _changelist_queries(client, model) -> int:
    url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda model: model.__name__)
def test_each_changelist_costs_the_same_queries_at_any_page_size(client, model):
    """The admin changelist is the floor the console pages are measured against
    (devtools bench_console): a query per row on a nullable foreign key (which
    Django's automatic select_related skips) made it 106 queries a page."""
    assert set(ROWS) == set(READ_ONLY)
    client.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    ROWS[model]()
    one = _changelist_queries(client, model)
    for _ in range(5):
        ROWS[model]()
    assert model.objects.count() >= 6
    assert _changelist_queries(client, model) == one
