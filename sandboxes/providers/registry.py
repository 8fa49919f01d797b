"""One shared, pooled client per provider configuration."""

from __future__ import annotations

import os
import threading

from sandboxes.providers.base import Provider, _setting

_providers: dict[tuple, Provider] = {}
_lock = threading.Lock()


def _api_key_reader(api_key_env: str):
    """Read the token at call time so it is never stored and a rotation takes effect."""

    def read() -> str | None:
        value = os.environ.get(api_key_env)
        if value is None and api_key_env == "DAYTONA_API_KEY":
            value = _setting("DAYTONA_API_KEY", "") or None
        return value

    return read


def _hosts(value) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    return tuple(sorted({h.strip() for h in value or () if h.strip()}))


def get_provider(
    name: str,
    *,
    api_url: str | None = None,
    api_key_env: str = "DAYTONA_API_KEY",
    toolbox_hosts: str | tuple[str, ...] | None = None,
) -> Provider:
    """The shared client for an environment's provider settings (DOMAIN §2.6).

    `toolbox_hosts` (blank: the DAYTONA_TOOLBOX_HOSTS setting) are the hosts
    besides the API's own that may receive the API key as toolbox proxies."""
    if name == "local":
        key = ("local", str(_setting("LOCAL_SANDBOX_ROOT", "var/sandboxes")), "", ())
    elif name == "daytona":
        url = (api_url or _setting("DAYTONA_API_URL", "") or "").rstrip("/")
        if not url:
            raise ValueError("daytona provider needs an API URL (set DAYTONA_API_URL)")
        hosts = _hosts(toolbox_hosts) or _hosts(_setting("DAYTONA_TOOLBOX_HOSTS", ()))
        key = ("daytona", url, api_key_env or "DAYTONA_API_KEY", hosts)
    else:
        raise ValueError(f"unknown provider {name!r} (expected 'daytona' or 'local')")
    with _lock:
        provider = _providers.get(key)
        if provider is None:
            provider = _build(*key)
            _providers[key] = provider
        return provider


def _build(name: str, location: str, api_key_env: str, toolbox_hosts: tuple) -> Provider:
    if name == "local":
        from sandboxes.providers.local import LocalProvider

        return LocalProvider(root=location)
    from sandboxes.providers.daytona import DaytonaProvider

    return DaytonaProvider(
        location,
        api_key=_api_key_reader(api_key_env),
        api_key_env=api_key_env,
        toolbox_hosts=toolbox_hosts,
    )


def reset_providers() -> None:
    """Close and forget every cached client (tests, settings changes)."""
    with _lock:
        providers = list(_providers.values())
        _providers.clear()
    for provider in providers:
        close = getattr(provider, "close", None)
        if close:
            close()
