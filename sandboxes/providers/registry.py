"""One shared, pooled client per provider configuration."""

from __future__ import annotations

import ipaddress
import os
import re
import threading
from urllib.parse import urlsplit

from sandboxes.providers.base import Provider, _setting

_providers: dict[tuple, Provider] = {}
_lock = threading.Lock()

# Never a provider token, whatever PROVIDER_API_KEY_VARIABLES says: the
# console's own secrets and database credentials would be sent as a Bearer
# token to whatever API URL the environment names.
_FORBIDDEN_KEY_VARIABLES = re.compile(
    r"SECRET|DATABASE|PASSWORD|PASSWD|REDIS|METRICS_TOKEN|^PG|^DJANGO|^AWS_|^GOOGLE_|^AZURE_",
    re.IGNORECASE,
)
_VARIABLE_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")


class ProviderSettingsError(ValueError):
    """An environment's provider settings the console refuses to use."""


# The providers the console has a client for; a record of any other provider
# (Paperclip knows more) is listed and held, never driven.
CLIENTS = ("daytona", "local")


def check_api_key_env(name: str) -> str:
    """The variable may hold a provider token: listed in
    PROVIDER_API_KEY_VARIABLES (default DAYTONA_API_KEY) and not one of the
    console's own secrets."""
    allowed = set(_setting("PROVIDER_API_KEY_VARIABLES", ["DAYTONA_API_KEY"]))
    if not _VARIABLE_NAME.match(name or "") or _FORBIDDEN_KEY_VARIABLES.search(name):
        raise ProviderSettingsError(
            f"api_key_env {name!r} cannot hold a provider token (it names one of the "
            "console's own secrets or is not a variable name)"
        )
    if name not in allowed:
        raise ProviderSettingsError(
            f"api_key_env {name!r} is not in PROVIDER_API_KEY_VARIABLES "
            f"({', '.join(sorted(allowed))}); add it there to use it"
        )
    return name


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_api_url(url: str, what: str = "API URL") -> str:
    """https, except to this machine (the simulator, a local tunnel)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and _loopback(parts.hostname):
        return url
    raise ProviderSettingsError(
        f"the provider {what} {url!r} must use https (plain http only to a loopback address): "
        "the API key travels in its Authorization header"
    )


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
    """The shared client for an environment's provider settings (docs/rules.md, what happens next).

    `toolbox_hosts` (blank: the DAYTONA_TOOLBOX_HOSTS setting) are the hosts
    besides the API's own that may receive the API key as toolbox proxies."""
    key: tuple[str, str, str, tuple[str, ...]]
    if name == "local":
        key = ("local", str(_setting("LOCAL_SANDBOX_ROOT", "var/sandboxes")), "", ())
    elif name == "daytona":
        url = (api_url or _setting("DAYTONA_API_URL", "") or "").rstrip("/")
        if not url:
            raise ValueError("daytona provider needs an API URL (set DAYTONA_API_URL)")
        hosts = _hosts(toolbox_hosts) or _hosts(_setting("DAYTONA_TOOLBOX_HOSTS", ()))
        check_api_url(url)
        for host in hosts:
            if "://" in host:
                check_api_url(host, "toolbox host")
        key = ("daytona", url, check_api_key_env(api_key_env or "DAYTONA_API_KEY"), hosts)
    else:
        raise ValueError(f"unknown provider {name!r} (expected 'daytona' or 'local')")  # CLIENTS
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
