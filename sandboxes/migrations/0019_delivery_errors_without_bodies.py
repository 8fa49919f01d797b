"""A delivery's last error no longer carries what the receiver answered.

Until now a non-2xx webhook answer was stored as "HTTP 500: <the first 300
bytes of the body>", and every role read it on the channel's page; a channel
pointed at an internal service read that service's answer back. Sending now
stores "HTTP 500" alone (sandboxes/notifications/delivery.py); this clears the
bodies stored before to the same words. Delivery rows are the console's
working state, rewritten at every attempt (not an append-only table).
"""

import re

from django.db import migrations

ANSWERED = re.compile(r"^HTTP (\d{3}): ")


def drop_bodies(apps, schema_editor):
    Delivery = apps.get_model("sandboxes", "NotificationDelivery")
    rows = Delivery.objects.filter(last_error__regex=r"^HTTP [0-9]{3}: ").only("pk", "last_error")
    for row in rows.iterator():
        code = int(ANSWERED.match(row.last_error).group(1))
        short = f"HTTP {code}: redirect not followed" if 300 <= code < 400 else f"HTTP {code}"
        if row.last_error != short:
            Delivery.objects.filter(pk=row.pk).update(last_error=short)


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0018_pass_heartbeat_and_interrupted")]

    operations = [migrations.RunPython(drop_bodies, migrations.RunPython.noop, elidable=True)]
