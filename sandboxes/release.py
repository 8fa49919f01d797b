"""The release rule (DOMAIN §2.5, seed 002): what a lease release really means,
decided by the run's durable outcome rather than by what the caller asked for."""

from sandboxes.models.choices import (
    WARM_POLICIES,
    Disposition,
    LeaseStatus,
    RunStatus,
)


def release_outcome(requested: str, run_status: str | None, lease_policy: str) -> tuple[str, str]:
    """Return (disposition, lease status) for a release.

    `keep_running` survives only a `succeeded` run; any other outcome (including
    an unknown or still-live run) becomes `stop_and_retain`. The lease status
    follows the run: cancelled → expired, failed/timed_out → failed, otherwise
    released. A reusable lease that was stopped and retained still exists, so
    it cannot be `expired` (destroyed): it stays `released`.
    """
    disposition = requested
    if requested == Disposition.KEEP_RUNNING and run_status != RunStatus.SUCCEEDED:
        disposition = Disposition.STOP_AND_RETAIN

    if run_status == RunStatus.CANCELLED:
        status = LeaseStatus.EXPIRED
    elif run_status in (RunStatus.FAILED, RunStatus.TIMED_OUT):
        status = LeaseStatus.FAILED
    else:
        status = LeaseStatus.RELEASED

    if (
        status == LeaseStatus.EXPIRED
        and disposition == Disposition.STOP_AND_RETAIN
        and lease_policy in WARM_POLICIES
    ):
        status = LeaseStatus.RELEASED
    return str(disposition), str(status)
