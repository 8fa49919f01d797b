"""Receipts and audit rows are append-only, enforced by the database itself so
that neither QuerySet.update() nor raw SQL can change or delete them."""

from django.db import migrations

TABLES = ("sandboxes_receipt", "sandboxes_auditevent")

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION console_reject_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
"""


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION, params=None)
        for table in TABLES:
            schema_editor.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION console_reject_change()"
            )
    elif vendor == "sqlite":
        for table in TABLES:
            for op in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} rows are append-only'); END"
                )


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        elif vendor == "sqlite":
            for op in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op}")
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS console_reject_change()")


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
