"""The superseded refresh (0029) gathers the sandboxes a statement touched once,
as two arrays, before it locks and updates their leases.

0015's two statements each joined the lease table with the transition table
(`(provider, provider_lease_id) IN (SELECT … FROM after_rows)`). The lock's
`ORDER BY l.id FOR UPDATE` then sorted every matched lease with the whole
transition row beside it (a locking join keeps the other side's row for its
recheck: 1,450 bytes a row), past work_mem onto disk, and each statement
hashed the transition table's keys again. On a mirror page of 5,000 new
leases the trigger took 53 ms of the insert's 133 ms (auto_explain: "Sort
Method: external merge Disk: 3872kB", "HashAggregate … Batches: 5 Disk
Usage: 1032kB"); a 5,000-row insert through psql, 67-77 ms of 154-177 ms.

Now the distinct keys are read once into `providers` and `sandboxes`, and
both statements take them as parameters (`unnest($1, $2)`): the sort carries
a lease and two short strings. The statements, their lock order and what
they compute are 0029's; EXECUTE still plans each with the table's current
size (0015).
"""

import importlib

from django.db import migrations

_0015 = importlib.import_module("sandboxes.migrations.0015_lease_superseded_planned_per_call")
_0029 = importlib.import_module("sandboxes.migrations.0029_lease_superseded_moved_by_set")

TABLE = _0015.TABLE
_KEYS = "(SELECT * FROM unnest($1::text[], $2::text[]) AS k(provider, provider_lease_id))"


def _gather(keys: str) -> str:
    """The distinct sandboxes of `keys` into the function's two arrays."""
    return f"""
        SELECT array_agg(k.provider), array_agg(k.provider_lease_id)
          INTO providers, sandboxes
          FROM (SELECT DISTINCT provider, provider_lease_id FROM {keys}) AS k;"""


PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION console_lease_superseded() RETURNS trigger AS $$
DECLARE
    providers text[];
    sandboxes text[];
BEGIN
    -- The refresh below updates this table: do not recurse into it.
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        {_gather("after_rows")}
    ELSIF TG_OP = 'DELETE' THEN
        {_gather("before_rows")}
    ELSE
        -- Only rows whose sandbox or acquired_at changed move anything. A
        -- status update, the most common, costs one set difference of the
        -- transition tables.
        IF NOT EXISTS (SELECT 1 FROM {_0029._CHANGED}) THEN
            RETURN NULL;
        END IF;
        {_gather(_0029._MOVED)}
    END IF;
    IF providers IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE $sql$
    SELECT 1 FROM {TABLE} l
    WHERE (l.provider, l.provider_lease_id) IN {_KEYS}
    ORDER BY l.id
    FOR UPDATE OF l $sql$ USING providers, sandboxes;
    EXECUTE $sql$
    UPDATE {TABLE} l SET superseded = {_0015._NEWER}
    WHERE (l.provider, l.provider_lease_id) IN {_KEYS}
      AND l.superseded IS DISTINCT FROM {_0015._NEWER} $sql$ USING providers, sandboxes;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0029.PG_FUNCTION, params=None)


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0029_lease_superseded_moved_by_set")]
    operations = [migrations.RunPython(forwards, backwards)]
