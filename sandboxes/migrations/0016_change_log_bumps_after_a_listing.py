"""The change log (0014) rewrites a transaction's row only after a listing.

0014's trigger gave a transaction's row a new bump on every statement, so that a
write made after a listing in the same transaction shows up as a higher bump.
A transaction that never lists paid for that too: a `load_events` file is one
transaction of ~15 statements a batch, and each rewrite of the same row left a
version no one could prune until the end, so every statement walked a longer
chain (about 20 ms of each batch by the 1,000th; quadratic over a file).

Now `changes.mark()` notes the bump a listing saw in a transaction-local setting,
and the trigger rewrites its transaction's row only while the row's bump is not
above it: once after each listing, never in a transaction that does not list.
Across transactions nothing changes: a write committed after a listing's
snapshot is found by its xid, whatever its bump (sandboxes/reconciler/changes.py).
"""

from django.db import migrations

OLD = """
CREATE OR REPLACE FUNCTION console_change_noted() RETURNS trigger AS $$
BEGIN
    INSERT INTO console_change (xid, bump)
    VALUES (pg_current_xact_id(), nextval('console_change_bump'))
    ON CONFLICT (xid) DO UPDATE SET bump = EXCLUDED.bump;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""

NEW = """
CREATE OR REPLACE FUNCTION console_change_noted() RETURNS trigger AS $$
BEGIN
    INSERT INTO console_change (xid, bump)
    VALUES (pg_current_xact_id(), nextval('console_change_bump'))
    ON CONFLICT (xid) DO UPDATE SET bump = EXCLUDED.bump
    WHERE console_change.bump <= COALESCE(
        NULLIF(current_setting('console.listed_bump', true), '')::bigint, -1);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def _run(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0015_lease_superseded_planned_per_call")]

    operations = [migrations.RunPython(_run(NEW), _run(OLD))]
