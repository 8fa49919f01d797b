"""A pass beats as it works (`last_seen_at`) and is marked `interrupted_at` when
a later pass finds its worker gone (docs/rules.md, claims and failures).

Rows from before are given the last time they were seen as far as anyone
knows: their finish, or for a pass that never finished its start, so the first
pass after this migration marks every pass killed before it as interrupted.
The partial index keeps that sweep to the few running rows of an ever-growing
table.
"""

from django.db import migrations, models
from django.db.models import F
from django.db.models.functions import Coalesce


def last_seen_as_known(apps, schema_editor):
    ReconcilerPass = apps.get_model("sandboxes", "ReconcilerPass")
    ReconcilerPass.objects.update(last_seen_at=Coalesce(F("finished_at"), F("started_at")))


class Migration(migrations.Migration):
    dependencies = [
        ("sandboxes", "0017_company_ids"),
    ]

    operations = [
        migrations.AddField(
            model_name="reconcilerpass",
            name="interrupted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="reconcilerpass",
            name="last_seen_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(last_seen_as_known, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="reconcilerpass",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", True), ("interrupted_at__isnull", True)),
                fields=["started_at"],
                name="pass_running",
            ),
        ),
    ]
