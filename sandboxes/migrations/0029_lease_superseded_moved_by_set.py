"""The superseded refresh (0015) finds the rows an UPDATE moved with a set
difference of the transition tables, not a join.

0015 asked `NOT EXISTS (before_rows JOIN after_rows ON id ...)`. An EXISTS is
planned to stop at its first row, and a nested loop starts at once, so the
planner chose one; when nothing moved (a status update, a mirror page of
leases re-read: the common case) the loop compared every row with every other
before it knew. 5,000 leases updated in one statement cost 7.6 s of trigger
time, 25,000,000 comparisons (`EXPLAIN ANALYZE` through auto_explain, a mirror
`--full` over a mirrored fleet), and twice the rows four times the time.

`after_rows EXCEPT before_rows` over (id, sandbox, acquired_at, superseded) is
the rows that moved, as their new values: a set operation hashes or sorts
both sides once, whatever the plan. The keys refreshed are the moved rows'
sandboxes before and after, as in 0015; the statements, their lock order and
what they compute are 0015's.
"""

import importlib

from django.db import migrations

_0015 = importlib.import_module("sandboxes.migrations.0015_lease_superseded_planned_per_call")

_COLUMNS = "id, provider, provider_lease_id, acquired_at, superseded"

# The rows an UPDATE changed in what the flag depends on (or the flag itself:
# a writer that set it is recomputed, so it never sticks), as their new values.
_CHANGED = f"""(
    SELECT {_COLUMNS} FROM after_rows
    EXCEPT
    SELECT {_COLUMNS} FROM before_rows
    ) AS changed"""

# Their sandboxes, before and after.
_MOVED = f"""(
    SELECT r.provider, r.provider_lease_id
    FROM (SELECT id, provider, provider_lease_id FROM before_rows
          UNION ALL
          SELECT id, provider, provider_lease_id FROM after_rows) AS r
    WHERE r.id IN (SELECT id FROM {_CHANGED})
    ) AS moved"""

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION console_lease_superseded() RETURNS trigger AS $$
BEGIN
    -- The refresh below updates this table: do not recurse into it.
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        {_0015._refresh("after_rows")}
    ELSIF TG_OP = 'DELETE' THEN
        {_0015._refresh("before_rows")}
    ELSE
        -- Only rows whose sandbox or acquired_at changed move anything. A
        -- status update, the most common, costs one set difference of the
        -- transition tables.
        IF NOT EXISTS (SELECT 1 FROM {_CHANGED}) THEN
            RETURN NULL;
        END IF;
        {_0015._refresh(_MOVED)}
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0015.PG_FUNCTION, params=None)


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0028_company_scope")]
    operations = [migrations.RunPython(forwards, backwards)]
