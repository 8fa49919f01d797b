"""A change log the listing reads to know whether anything it reads changed.

A pass over an unchanged fleet should not rebuild every candidate (issue 16).
Every statement that writes a table the listing reads notes its transaction in
`console_change` (one row per writing transaction, its latest `bump` from a
sequence), from a statement-level trigger, whoever writes (ingest, the mirror,
the console, a fixture, raw SQL, a COPY in replica mode: the triggers fire
ALWAYS). A pass records the snapshot its listing started from and the highest
bump it saw (sandboxes/reconciler/changes.py); anything committed after that
snapshot, or written by the same transaction since, shows up as a row the
snapshot does not see or a higher bump. Rows are per transaction and insert-only
across transactions, so two writers never wait on each other here.

Retirement counts only for the columns the listing reads: the provider sizes a
pass records each pass (`reported_*`) are not a change of the fleet.

PostgreSQL only: on SQLite every pass lists.
"""

from django.db import migrations, models

WATCHED = (
    "sandboxes_environment",
    "sandboxes_issue",
    "sandboxes_executionworkspace",
    "sandboxes_heartbeatrun",
    "sandboxes_environmentlease",
    "sandboxes_leaseintent",
    "sandboxes_pendingexport",
    "sandboxes_recoveryaction",
    "sandboxes_receipt",
)
RETIREMENT = "sandboxes_retirement"
# The Retirement columns the listing reads (sandboxes/reconciler/listing.py).
RETIREMENT_COLUMNS = (
    "lease_id",
    "environment_id",
    "provider",
    "provider_lease_id",
    "kind",
    "stage",
    "holds",
    "operator_hold_reason",
    "started_for_salvage",
    "next_attempt_at",
    "claimed_until",
    "closed_at",
)

PG_SETUP = """
CREATE SEQUENCE console_change_bump;
CREATE TABLE console_change (
    xid xid8 PRIMARY KEY,
    bump bigint NOT NULL
);
CREATE INDEX console_change_by_bump ON console_change (bump);
CREATE OR REPLACE FUNCTION console_change_noted() RETURNS trigger AS $$
BEGIN
    INSERT INTO console_change (xid, bump)
    VALUES (pg_current_xact_id(), nextval('console_change_bump'))
    ON CONFLICT (xid) DO UPDATE SET bump = EXCLUDED.bump;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def _triggers() -> list[str]:
    sql = []
    for table in WATCHED:
        sql.append(
            f"CREATE TRIGGER {table}_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
            f"ON {table} FOR EACH STATEMENT EXECUTE FUNCTION console_change_noted()"
        )
    columns = ", ".join(RETIREMENT_COLUMNS)
    sql.append(
        f"CREATE TRIGGER {RETIREMENT}_changed AFTER INSERT OR DELETE OR TRUNCATE "
        f"OR UPDATE OF {columns} ON {RETIREMENT} "
        "FOR EACH STATEMENT EXECUTE FUNCTION console_change_noted()"
    )
    for table in (*WATCHED, RETIREMENT):
        # Also in replica mode (a bulk load that skips FK triggers still changes the fleet).
        sql.append(f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {table}_changed")
    return sql


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(PG_SETUP, params=None)
    for sql in _triggers():
        schema_editor.execute(sql, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in (*WATCHED, RETIREMENT):
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_changed ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS console_change_noted()")
    schema_editor.execute("DROP TABLE IF EXISTS console_change")
    schema_editor.execute("DROP SEQUENCE IF EXISTS console_change_bump")


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0013_view_console")]

    operations = [
        migrations.AddField(
            model_name="reconcilerpass",
            name="listing",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The listing this pass's candidates come from: its snapshot, "
                "when a time-based rule comes due, and whether it was reused unchanged.",
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
