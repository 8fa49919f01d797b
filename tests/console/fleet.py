"""A fleet of kept sandboxes in every stage, for page tests and query counts."""

from datetime import timedelta

from django.utils import timezone

from sandboxes.models.choices import RetirementKind, Stage
from tests.factories import (
    AuditEventFactory,
    EnvironmentFactory,
    ReconcilerPassFactory,
    RetirementFactory,
)

STAGES = list(Stage.values)
KINDS = [k for k in RetirementKind.values]


def build_fleet(n: int, *, environments: int = 2) -> list:
    envs = [EnvironmentFactory() for _ in range(environments)]
    now = timezone.now()
    rows = []
    for i in range(n):
        stage = STAGES[i % len(STAGES)]
        rows.append(
            RetirementFactory(
                lease__environment=envs[i % len(envs)],
                stage=stage,
                kind=KINDS[i % len(KINDS)],
                holds=["retention"] if i % 3 == 0 else [],
                hold_reasons={"retention": "inside the window"} if i % 3 == 0 else {},
                needs_attention=i % 7 == 0,
                size_bytes=1000 * i if i % 2 else None,
                closed_at=now if stage in (Stage.RETIRED, Stage.DISMISSED) else None,
            )
        )
        AuditEventFactory(sandbox_id=rows[-1].provider_lease_id)
    for i in range(max(n // 2, 1)):
        ReconcilerPassFactory(
            started_at=now - timedelta(minutes=5 * (i + 1)),
            finished_at=now - timedelta(minutes=5 * (i + 1)) + timedelta(seconds=3),
            candidates=n - i,
            retired=i % 3,
        )
    return rows
