"""The admin site shows mirrored, append-only and token rows but cannot change them."""

import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.utils import timezone

from sandboxes import models as m
from tests.factories import ApiTokenFactory, UserFactory

pytestmark = pytest.mark.django_db

READ_ONLY = [
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
