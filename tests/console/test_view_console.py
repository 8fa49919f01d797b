"""Reading the console needs `view_console` (not `export_audit`, which only
exports the audit trail); every role has it, and migration 0013 gave it to
everyone who could read before, so nobody lost access."""

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.urls import reverse

from sandboxes.roles import ADMINS, OPERATORS, REVIEWERS
from tests.console.conftest import login
from tests.factories import RetirementFactory, UserFactory

pytestmark = pytest.mark.django_db

PAGES = ["dashboard", "sandbox-list", "approvals", "audit", "passes", "environments"]
EXPORTS = ["audit-export-csv", "audit-export-json"]


def _perm(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="sandboxes", codename=codename)


def _user_with(*codenames: str):
    user = UserFactory()
    user.user_permissions.add(*[_perm(c) for c in codenames])
    return user


def test_view_console_alone_reads_every_page_but_cannot_export_the_audit():
    client = login(_user_with("view_console"))
    r = RetirementFactory()
    for name in PAGES:
        assert client.get(reverse(name)).status_code == 200, name
    assert client.get(reverse("sandbox-detail", kwargs={"pk": r.pk})).status_code == 200
    for name in EXPORTS:
        assert client.get(reverse(name)).status_code == 403, name
    assert b"Export these rows" not in client.get(reverse("audit")).content


def test_without_view_console_every_page_is_403_even_with_export_audit():
    client = login(_user_with("export_audit"))
    for name in PAGES + EXPORTS:
        assert client.get(reverse(name)).status_code == 403, name


@pytest.mark.parametrize("group", [REVIEWERS, OPERATORS, ADMINS])
def test_every_role_reads_the_console_and_exports_the_audit(group):
    client = login(UserFactory(groups=[group]))
    assert Group.objects.get(name=group).permissions.filter(codename="view_console").exists()
    for name in PAGES + EXPORTS:
        assert client.get(reverse(name)).status_code == 200, (group, name)


def test_the_migration_keeps_everyone_who_could_read():
    """Groups and users that held export_audit (reading, before) get view_console."""
    migration = importlib.import_module("sandboxes.migrations.0013_view_console")
    view, export = _perm("view_console"), _perm("export_audit")
    custom = Group.objects.create(name="auditors")
    custom.permissions.add(export)
    direct = _user_with("export_audit")
    via_group = UserFactory(groups=["auditors"])
    neither = UserFactory()
    reviewers = Group.objects.get(name=REVIEWERS)
    reviewers.permissions.remove(view)  # as before the migration

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection
    migration.grant_view_console(apps, editor)

    assert view in custom.permissions.all() and view in reviewers.permissions.all()
    assert view in direct.user_permissions.all()
    for user, reads in ((direct, True), (via_group, True), (neither, False)):
        user = type(user).objects.get(pk=user.pk)  # no cached permissions
        assert user.has_perm("sandboxes.view_console") is reads
        status = login(user).get(reverse("sandbox-list")).status_code
        assert status == (200 if reads else 403)
