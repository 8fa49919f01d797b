"""The notifications' scheduled task, the `notifications sweep` schedule that
`setup_schedules` creates: it announces an overdue reconciler and queues
every due delivery. It sits above both halves it calls, the outbox
(`events.py`) and the sending (`delivery.py`)."""

from .delivery import due_ids, enqueue
from .events import reconciler_overdue


def sweep() -> dict:
    """Announce an overdue reconciler, and queue every due delivery (retries,
    and any whose first queueing failed)."""
    reconciler_overdue()
    ids = due_ids()
    enqueue(ids)
    return {"queued": len(ids)}
