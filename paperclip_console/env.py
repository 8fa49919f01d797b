"""Typed readers for environment variables that fail loudly on bad values."""

import ipaddress
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def split_host(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address →
    (host lower-cased without brackets, port or None); ValueError otherwise."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            raise ValueError(entry)
        host = str(ipaddress.IPv6Address(host))
    elif entry.count(":") > 1:
        host, port = str(ipaddress.IPv6Address(entry)), None
    else:
        host, _, port = entry.partition(":")
        port = port if ":" in entry else None
    if not host or any(c in host for c in "/@?#[] "):
        raise ValueError(entry)
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(entry)
    return host, int(port) if port is not None else None


def envhosts(name: str, default: list[str]) -> list[str]:
    """Comma-separated hosts as `split_host` reads them; a bad entry stops the start."""
    for item in envlist(name, default):
        try:
            split_host(item)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} lists host or host:port entries (e.g. hooks.internal:8443, "
                f"[fd00::1]:443), got {item!r}"
            ) from None
    return envlist(name, default)


_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def envapiurl(name: str) -> str:
    """An API's base URL (scheme://host[:port][/prefix]) or "" when unset. https,
    or http to a loopback host only (a key is sent there); a bad value stops the
    start, naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    scheme, sep, rest = raw.partition("://")
    authority = rest.split("/", 1)[0]
    problem = ""
    if not sep or scheme.lower() not in ("http", "https") or not authority:
        problem = "must be an http(s) URL such as https://paperclip.example.com"
    elif any(c in raw for c in "?#@ "):
        problem = "must not carry credentials, a query or a fragment"
    else:
        try:
            host, _port = split_host(authority)
        except ValueError:
            host, problem = "", "names no valid host[:port]"
        if not problem and scheme.lower() == "http" and host not in _LOOPBACK:
            problem = "must use https (the API key is sent to it); http is for loopback only"
    if problem:
        raise ImproperlyConfigured(f"{name} {problem}, got {raw!r}")
    return raw.rstrip("/")
