"""A psycopg cursor that counts what it sends (statements and COPYs): the
mirror's writers open cursors of their own (sandboxes/mirror/bulk.py, write.py),
which Django's CaptureQueriesContext does not see."""

import psycopg


class Counting(psycopg.Cursor):
    statements = 0

    def execute(self, *args, **kwargs):
        Counting.statements += 1
        return super().execute(*args, **kwargs)

    def copy(self, *args, **kwargs):
        Counting.statements += 1
        return super().copy(*args, **kwargs)
