"""A reconciler worker's pass-scoped state: the provider client for each
record (refusing a lease whose provider is not its environment's), the
per-pass cap, and what a failed step leaves behind (docs/rules.md, claims and
failures: backoff from 30 s doubling to 30 min, needs attention after five
failures, never given up)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from sandboxes import audit
from sandboxes.models import Environment, Retirement
from sandboxes.models.choices import Stage
from sandboxes.notifications import events as notify
from sandboxes.providers.base import ProviderError
from sandboxes.receipts import write_stop_receipts

from .claims import DB_LOST, ClaimLost, fenced
from .steps import stop

if TYPE_CHECKING:
    from .plan import Plan

log = logging.getLogger(__name__)

BACKOFF_FIRST = 30
BACKOFF_CAP = 30 * 60
NEEDS_ATTENTION_AFTER = 5


def backoff(attempts: int) -> timedelta:
    """30 s, doubling, capped at 30 min; once 5 attempts have failed, every 30 min
    (docs/rules.md, claims and failures), the same point at which needs_attention is set."""
    if attempts >= NEEDS_ATTENTION_AFTER:
        return timedelta(seconds=BACKOFF_CAP)
    return timedelta(seconds=min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** max(0, attempts - 1)))


class ProviderMismatch(ProviderError):
    """The lease names another provider than its environment's settings: calling
    the environment's provider would act on the wrong sandbox (or none)."""


def default_provider_for(environment: Environment, provider_name: str = ""):
    """The client for a lease's provider with its environment's API settings."""
    return environment.provider_client(provider_name)


@dataclass
class Worker:
    """One reconciler worker's pass-scoped state."""

    name: str = ""
    provider_for: Callable | None = None  # None: default_provider_for
    retired_by_env: Counter = field(default_factory=Counter)
    cap_by_env: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    advanced: int = 0
    retired: int = 0
    failed: int = 0
    _providers: dict = field(default_factory=dict)

    def provider(self, environment: Environment, provider_name: str):
        """The client for the record's (the lease's) provider. Refuses when the
        environment's provider settings are for another provider."""
        if provider_name != environment.provider:
            raise ProviderMismatch(
                f"the lease's provider {provider_name!r} differs from its environment's "
                f"provider {environment.provider!r}: refusing every provider call"
            )
        key = (environment.pk, provider_name)
        if key not in self._providers:
            if self.provider_for is not None:
                self._providers[key] = self.provider_for(environment)
            else:
                self._providers[key] = default_provider_for(environment, provider_name)
        return self._providers[key]

    def provider_of(self, plan: Plan):
        # A plan built without a provider (tests) means the environment's.
        return self.provider(plan.environment, plan.provider or plan.environment.provider)

    def under_cap(self, environment: Environment) -> bool:
        return self.retired_by_env[environment.pk] < environment.max_retirements_per_pass


def _stop_if_started(retirement_id, attempt_id, worker: Worker) -> None:
    """Put back the state the console found: a sandbox it started for salvage is
    stopped again. A failure here is left to the retry (it stops it then)."""
    try:
        r0 = Retirement.objects.select_related("environment").get(pk=retirement_id)
        if r0.started_for_salvage and r0.attempt_id == attempt_id:
            conf = stop(worker.provider(r0.environment, r0.provider), r0.provider_lease_id)
            with fenced(retirement_id, attempt_id) as r:
                if conf is not None:
                    write_stop_receipts(r, conf, retain=False)
                r.started_for_salvage = False
                r.save()
    except DB_LOST:
        raise
    except Exception as stop_exc:  # the retry will stop it; record the first error
        log.warning("could not stop %s after a failure: %s", retirement_id, stop_exc)


def record_failure(retirement_id, attempt_id, exc: BaseException, worker: Worker) -> None:
    """Keep the sandbox as it was (stopped again if we started it) and schedule a retry."""
    _stop_if_started(retirement_id, attempt_id, worker)
    now = timezone.now()
    try:
        with fenced(retirement_id, attempt_id) as r:
            was_attention = r.needs_attention
            was_stage = r.stage
            was_attempts = r.attempts
            r.attempts += 1
            r.failing_since = r.failing_since or now
            r.last_error = f"{type(exc).__name__}: {exc}"[:2000]
            r.needs_attention = r.attempts >= NEEDS_ATTENTION_AFTER
            r.next_attempt_at = now + backoff(r.attempts)
            r.stage = Stage.FAILED
            r.save()
            # Every failed attempt gets its own audit row with its error; the one
            # that turns the record to needs_attention is named so.
            audit.record(
                actor=None,
                action="retirement.needs_attention"
                if r.needs_attention and not was_attention
                else "retirement.failed",
                obj=r,
                reason=r.last_error,
                before={"stage": was_stage, "attempts": was_attempts},
                after={
                    "stage": r.stage,
                    "attempts": r.attempts,
                    "next_attempt_at": r.next_attempt_at.isoformat(),
                },
            )
            if r.needs_attention and not was_attention:
                notify.needs_attention(r)
    except ClaimLost:
        pass
    worker.failed += 1
