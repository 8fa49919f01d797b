"""The notifications' scheduled task, the `notifications sweep` schedule that
`setup_schedules` creates: it announces an overdue reconciler and queues
every due delivery, and files and queues the owners' digests. It sits above
the halves it calls, the outbox (`events.py`), the sending (`delivery.py`) and
the owners' digests (`owner_digest.py`)."""

from . import owner_digest
from .delivery import due_ids, enqueue
from .events import reconciler_overdue


def sweep() -> dict:
    """Announce an overdue reconciler, queue every due delivery (retries, and
    any whose first queueing failed), and file and queue the owners' digests."""
    reconciler_overdue()
    ids = due_ids()
    enqueue(ids)
    digests = owner_digest.run()
    return {"queued": len(ids), "owner_digests": digests["queued"]}
