"""A reconciler worker's pass-scoped state: the provider client for each
record (refusing a lease whose provider is not its environment's), the
per-pass cap, and its counts. What a failed step leaves behind is
`failures.py`'s."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from sandboxes.models import Environment
from sandboxes.providers.base import ProviderError


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

    def under_cap(self, environment: Environment) -> bool:
        return self.retired_by_env[environment.pk] < environment.max_retirements_per_pass
