"""Releases as Paperclip reports them (docs/rules.md, candidate kinds, seed 002).

The console is a mirror and a witness: a `lease.released` event is recorded
exactly as sent. Only a missing status is filled in, and only from the
disposition the event carries - never from the run's outcome. A release that
broke the rule (an unsuccessful run kept running) stays visible as such, and
the `stop_after_unsuccessful_run` correction catches it.
"""

from .codes import Disposition, LeaseStatus

STATUS_FOR_DISPOSITION = {
    Disposition.KEEP_RUNNING: LeaseStatus.RETAINED,  # kept running
    Disposition.STOP_AND_RETAIN: LeaseStatus.RELEASED,  # stopped and kept
    Disposition.DESTROY: LeaseStatus.EXPIRED,  # destroyed
}


def release_status(disposition: str, status: str | None = None) -> str:
    """The lease status a release records: the one sent, else the disposition's."""
    if status:
        return str(status)
    return str(STATUS_FOR_DISPOSITION[Disposition(disposition)])


def release_status_sql(status: str, disposition: str) -> str:
    """`release_status` as a SQL expression over two columns, for set-based
    writes: the status sent, else the disposition's, from the same table."""
    cases = " ".join(
        f"WHEN '{disposition_value.value}' THEN '{status_value.value}'"
        for disposition_value, status_value in STATUS_FOR_DISPOSITION.items()
    )
    return f"COALESCE({status}, CASE {disposition} {cases} END)"
