"""A `view_console` permission to read the console, instead of reusing
`export_audit` (which now means only exporting the audit trail).

Every console role carried export_audit, and reading asked for it; so that
nobody loses access, every group and every user that holds export_audit
today is given view_console too. (ensure_roles gives the roles their full
list after migrate, as always.)
"""

from django.conf import settings
from django.db import migrations

APP, MODEL = "sandboxes", "retirement"


def grant_view_console(apps, schema_editor):
    """view_console for every group and user holding export_audit."""
    db = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    content_type, _ = ContentType.objects.using(db).get_or_create(app_label=APP, model=MODEL)
    export = (
        Permission.objects.using(db)
        .filter(content_type=content_type, codename="export_audit")
        .first()
    )
    if export is None:
        return  # a new database: nobody holds anything yet
    # Permissions are created after migrate (post_migrate); this one is needed now.
    view, _ = Permission.objects.using(db).get_or_create(
        content_type=content_type,
        codename="view_console",
        defaults={"name": "Can read the console"},
    )
    for group in Group.objects.using(db).filter(permissions=export):
        group.permissions.add(view)
    for user in User.objects.using(db).filter(user_permissions=export):
        user.user_permissions.add(view)


class Migration(migrations.Migration):
    dependencies = [
        ("sandboxes", "0012_lease_superseded_row_locks"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="retirement",
            options={
                "permissions": [
                    ("approve_retirement", "Can approve a retirement"),
                    ("retry_retirement", "Can retry a retirement now"),
                    ("hold_retirement", "Can hold or release a hold on a retirement"),
                    ("attest_retirement", "Can discard unsaved work and retire"),
                    ("export_audit", "Can export the audit trail"),
                    ("manage_tokens", "Can create and revoke API tokens"),
                    ("view_console", "Can read the console"),
                ]
            },
        ),
        migrations.RunPython(grant_view_console, migrations.RunPython.noop),
    ]
