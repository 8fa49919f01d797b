"""Drop five indexes another index of the same table already leads with.

Django gives every foreign key an index of its own; where a composite index
or unique constraint starts with the same column, the single-column index
answers nothing the longer one does not (a btree serves any prefix of its
columns), yet every insert pays for it: on the write paths the mirror and
ingest share, a lease had 10 indexes to maintain and a receipt 7.

| table | dropped | still served by |
|---|---|---|
| sandboxes_environmentlease | (issue_id) | lease_issue_status (issue_id, status) |
| sandboxes_heartbeatrun | (issue_id) | run_issue_status (issue_id, status) |
| sandboxes_receipt | (lease_id), receipt_lease_kind (lease_id, kind) | receipt_unique_request (lease_id, kind, request_id) |
| sandboxes_receipt | (retirement_id) | receipt_retirement_kind (retirement_id, kind) |
| sandboxes_recoveryaction | (lease_id) | recovery_lease_status (lease_id, status) |

The foreign keys stay as they are: the indexes are dropped by name (Django's
AlterField of db_index would drop and re-add each constraint, re-checking
every row of the table). The other duplicates (notifications, digests,
keep links) are on tables written a row at a time and are left alone.
"""

import django.db.models.deletion
from django.db import migrations, models

# (index, table, columns): Django's own names for the foreign keys' indexes.
DROPPED = [
    ("sandboxes_environmentlease_issue_id_f3a11bb0", "sandboxes_environmentlease", "issue_id"),
    ("sandboxes_heartbeatrun_issue_id_5847e64e", "sandboxes_heartbeatrun", "issue_id"),
    ("sandboxes_receipt_lease_id_687a7d42", "sandboxes_receipt", "lease_id"),
    ("sandboxes_receipt_retirement_id_f0332c5a", "sandboxes_receipt", "retirement_id"),
    ("sandboxes_recoveryaction_lease_id_32f9d04d", "sandboxes_recoveryaction", "lease_id"),
]


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0030_lease_superseded_narrow_keys")]

    operations = [
        migrations.RemoveIndex(model_name="receipt", name="receipt_lease_kind"),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX "{index}" ON "{table}" ("{column}")',
                )
                for index, table, column in DROPPED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="environmentlease",
                    name="issue",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="leases",
                        to="sandboxes.issue",
                    ),
                ),
                migrations.AlterField(
                    model_name="heartbeatrun",
                    name="issue",
                    field=models.ForeignKey(
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="runs",
                        to="sandboxes.issue",
                    ),
                ),
                migrations.AlterField(
                    model_name="receipt",
                    name="lease",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="receipts",
                        to="sandboxes.environmentlease",
                    ),
                ),
                migrations.AlterField(
                    model_name="receipt",
                    name="retirement",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="receipts",
                        to="sandboxes.retirement",
                    ),
                ),
                migrations.AlterField(
                    model_name="recoveryaction",
                    name="lease",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        help_text="The restore-source lease the evidence names, when it names one.",
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="recovery_actions",
                        to="sandboxes.environmentlease",
                    ),
                ),
            ],
        ),
    ]
