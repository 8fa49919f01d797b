"""`EnvironmentLease.superseded`: a row with a later row on its sandbox is history.

Lease rows accumulate for ever, and only the newest row per sandbox is ever
judged (DOMAIN §2.1). The flag is kept by the database itself, in the
transaction that writes the rows, whoever writes them (ingest, the mirror, the
console, a fixture, raw SQL), so the listing can skip history through the
partial index `lease_keepable` instead of probing every row's siblings.

The flag is only ever a shortcut for what the listing checks in full anyway
(its `newer_lease` test): a row is flagged only when another row on the same
sandbox has a strictly later, known `acquired_at`. Undated rows and ties are
never flagged; the listing judges them as before.

PostgreSQL: statement-level triggers with transition tables recompute the flag
for every sandbox a statement touched, set-based; a per-sandbox advisory lock
(taken in a fixed order) makes concurrent writers of one sandbox recompute one
after the other, each with a fresh snapshot, so the flag never goes stale.
SQLite (one writer at a time): row-level triggers.
"""

from django.db import migrations, models

TABLE = "sandboxes_environmentlease"

# The flag of every row on the sandboxes in `keys` (a relation of provider,
# provider_lease_id), computed in the UPDATE itself so a concurrent change of a
# row is re-checked against its new version.
_NEWER = f"""EXISTS (
    SELECT 1 FROM {TABLE} n
    WHERE n.provider = l.provider AND n.provider_lease_id = l.provider_lease_id
      AND n.acquired_at > l.acquired_at)"""


def _refresh(keys: str) -> str:
    return f"""
        PERFORM pg_advisory_xact_lock(locks.lock_key)
        FROM (SELECT DISTINCT hashtextextended(provider || '/' || provider_lease_id, 16)
                       AS lock_key
              FROM {keys} ORDER BY 1) locks;
        UPDATE {TABLE} l SET superseded = {_NEWER}
        WHERE (l.provider, l.provider_lease_id) IN (SELECT provider, provider_lease_id FROM {keys})
          AND l.superseded IS DISTINCT FROM {_NEWER};"""


_MOVED = """(
    SELECT k.provider, k.provider_lease_id
    FROM before_rows b JOIN after_rows a ON a.id = b.id,
         LATERAL (VALUES (b.provider, b.provider_lease_id),
                         (a.provider, a.provider_lease_id)) AS k(provider, provider_lease_id)
    WHERE (b.provider, b.provider_lease_id, b.acquired_at, b.superseded)
          IS DISTINCT FROM (a.provider, a.provider_lease_id, a.acquired_at, a.superseded)
    ) AS moved"""

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION console_lease_superseded() RETURNS trigger AS $$
BEGIN
    -- The refresh below updates this table: do not recurse into it.
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        {_refresh("after_rows")}
    ELSIF TG_OP = 'DELETE' THEN
        {_refresh("before_rows")}
    ELSE
        -- Only rows whose sandbox or acquired_at changed move anything (or
        -- whose flag a writer set, e.g. saving a model loaded before the flag
        -- changed: recomputed, so it never sticks). A status update, the most
        -- common, costs one join of the transition tables.
        IF NOT EXISTS (SELECT 1 FROM {_MOVED}) THEN
            RETURN NULL;
        END IF;
        {_refresh(_MOVED)}
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""

PG_TRIGGERS = [
    f"CREATE TRIGGER lease_superseded_insert AFTER INSERT ON {TABLE} "
    "REFERENCING NEW TABLE AS after_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION console_lease_superseded()",
    f"CREATE TRIGGER lease_superseded_update AFTER UPDATE ON {TABLE} "
    "REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION console_lease_superseded()",
    f"CREATE TRIGGER lease_superseded_delete AFTER DELETE ON {TABLE} "
    "REFERENCING OLD TABLE AS before_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION console_lease_superseded()",
]


def _sqlite_refresh(row: str) -> str:
    return f"""
    UPDATE {TABLE} SET superseded = EXISTS (
        SELECT 1 FROM {TABLE} n
        WHERE n.provider = {TABLE}.provider AND n.provider_lease_id = {TABLE}.provider_lease_id
          AND n.acquired_at > {TABLE}.acquired_at)
    WHERE provider = {row}.provider AND provider_lease_id = {row}.provider_lease_id;"""


SQLITE_TRIGGERS = [
    f"CREATE TRIGGER lease_superseded_insert AFTER INSERT ON {TABLE} "
    f"BEGIN {_sqlite_refresh('NEW')} END",
    f"CREATE TRIGGER lease_superseded_update "
    f"AFTER UPDATE OF provider, provider_lease_id, acquired_at, superseded ON {TABLE} "
    f"BEGIN {_sqlite_refresh('NEW')} {_sqlite_refresh('OLD')} END",
    f"CREATE TRIGGER lease_superseded_delete AFTER DELETE ON {TABLE} "
    f"BEGIN {_sqlite_refresh('OLD')} END",
]

BACKFILL = f"""
UPDATE {TABLE} SET superseded = TRUE
WHERE EXISTS (
    SELECT 1 FROM {TABLE} n
    WHERE n.provider = {TABLE}.provider AND n.provider_lease_id = {TABLE}.provider_lease_id
      AND n.acquired_at > {TABLE}.acquired_at)
"""


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    schema_editor.execute(BACKFILL, params=None)
    if vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION, params=None)
        for sql in PG_TRIGGERS:
            schema_editor.execute(sql, params=None)
    elif vendor == "sqlite":
        for sql in SQLITE_TRIGGERS:
            schema_editor.execute(sql, params=None)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for name in ("insert", "update", "delete"):
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS lease_superseded_{name} ON {TABLE}")
        else:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS lease_superseded_{name}")
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS console_lease_superseded()")


# Kept rows are few, and almost all of them are not superseded: without joint
# statistics PostgreSQL multiplies the two selectivities, expects ten times the
# rows `lease_keepable` holds and hashes whole tables instead of probing.
STATISTICS = (
    f"CREATE STATISTICS IF NOT EXISTS lease_status_superseded (mcv) "
    f"ON status, superseded FROM {TABLE}"
)


def statistics(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(STATISTICS, params=None)


def no_statistics(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP STATISTICS IF EXISTS lease_status_superseded", params=None)


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0008_retirement_failing_since")]

    operations = [
        migrations.AddField(
            model_name="environmentlease",
            name="superseded",
            field=models.BooleanField(
                default=False,
                editable=False,
                help_text="Another row on the same sandbox has a later acquired_at: this row is "
                "history, never the one judged. Maintained by the database.",
            ),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.AddIndex(
            model_name="environmentlease",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ("released", "failed", "retained", "pending_cleanup")),
                    ("superseded", False),
                ),
                fields=["environment"],
                name="lease_keepable",
            ),
        ),
        migrations.AddIndex(
            model_name="environmentlease",
            index=models.Index(
                condition=models.Q(("status__in", ("active", "retained", "pending_cleanup"))),
                fields=["provider", "provider_lease_id"],
                name="lease_sharing",
            ),
        ),
        migrations.AddIndex(
            model_name="heartbeatrun",
            index=models.Index(
                condition=models.Q(("status__in", ("queued", "scheduled_retry", "running"))),
                fields=["issue"],
                name="run_live_by_issue",
            ),
        ),
        migrations.RunPython(statistics, no_statistics),
    ]
