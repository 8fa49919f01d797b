"""What a notification may reach: only public addresses, unless the host is
listed in NOTIFY_ALLOWED_HOSTS (README: Notifications).

A channel's host is resolved and every address it resolves to is judged, when
the channel is saved and again when it is sent (DNS may answer differently by
then). A webhook's connection is opened to the very address judged at that
moment (`guarded_client`), so a second DNS answer cannot move it; an Apprise
URL is judged at the host it names just before Apprise sends, with redirects
off.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

from paperclip_console.env import split_host

# Cloud metadata services (AWS and its ECS task credentials, AWS over IPv6,
# Alibaba, Oracle): named in the refusal; 192.0.0.192 is otherwise "global".
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
# Carrier-grade NAT space: neither private nor global to Python.
SHARED = ipaddress.ip_network("100.64.0.0/10")
# NAT64's well-known prefix carries an IPv4 address in its last 32 bits.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Apprise modes in which the URL's "host" is a token and the service is public
# (ntfy.sh, t2bot.io, LaMetric's cloud).
PUBLIC_SERVICE_MODES = frozenset({"cloud", "t2bot"})

UNLESS = "notifications may not reach internal addresses unless NOTIFY_ALLOWED_HOSTS lists the host"


class AddressRefused(Exception):
    """The host is, or resolves to, an address notifications may not reach."""


def _judged(ip):
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), or itself."""
    if ip.version == 6:
        if ip.ipv4_mapped:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour:
            return ip.sixtofour
    return ip


def internal_kind(address: str) -> str | None:
    """Why `address` is internal, in words ("a loopback address"), or None if public."""
    original = ipaddress.ip_address(address)
    ip = _judged(original)
    kinds = (
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip in SHARED, "a shared (carrier-grade NAT) address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    words = next((words for internal, words in kinds if internal), None)
    if original in METADATA or ip in METADATA:
        return f"{words} (a cloud metadata service)" if words else "a cloud metadata address"
    return words


def _bare(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def listed(host: str, port: int | None) -> bool:
    """NOTIFY_ALLOWED_HOSTS names this host, on any port or on this one."""
    host = _bare(host)
    for entry in getattr(settings, "NOTIFY_ALLOWED_HOSTS", ()):
        try:
            name, only = split_host(entry)
        except ValueError:
            continue  # the setting is checked at start (envhosts)
        if _bare(name) == host and (only is None or only == port):
            return True
    return False


def resolve(host: str, port: int | None) -> list[str]:
    """Every address `host` resolves to (a literal address resolves to itself)."""
    infos = socket.getaddrinfo(_bare(host), port or 0, type=socket.SOCK_STREAM)
    # An inet sockaddr's first item is the address text (str() only for the checker).
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def reachable(host: str, port: int | None) -> list[str]:
    """The addresses of `host` once none of them is internal (or the host is listed).

    Raises AddressRefused; OSError or UnicodeError when the name does not resolve."""
    addresses = resolve(host, port)
    if listed(host, port):
        return addresses
    for address in addresses:
        words = internal_kind(address)
        if words:
            shown = _bare(host)
            if shown == _bare(address.split("%")[0]):
                raise AddressRefused(f"{shown} is {words}; {UNLESS}")
            raise AddressRefused(f"{shown} resolves to {address}, {words}; {UNLESS}")
    return addresses


def check_on_save(targets) -> None:
    """Refuse a channel whose hosts are internal. A name that does not resolve
    is accepted: it reaches nothing now, and every send judges it again."""
    for host, port in targets:
        if listed(host, port):
            continue
        try:
            reachable(host, port)
        except (OSError, UnicodeError):
            continue


def check_on_send(targets) -> None:
    """Refuse (AddressRefused) or fail (OSError: does not resolve) before a send."""
    for host, port in targets:
        try:
            reachable(host, port)
        except (OSError, UnicodeError) as exc:
            raise OSError(f"{_bare(host)} does not resolve ({exc})") from exc


# --- the hosts a URL reaches --------------------------------------------------------------


def webhook_targets(url: str) -> list[tuple[str, int]]:
    """ValueError (saying why) for a URL without a host or with a bad port."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError("it names no host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return [(parts.hostname, port)]


def apprise_targets(plugin) -> list[tuple[str, int | None]]:
    """The hosts an Apprise service connects to that its URL names: an email
    URL's SMTP server, a self-hosted service's {host}; none for a service at
    its own public address (slack://, discord://, ntfy:// without a host)."""
    smtp = getattr(plugin, "smtp_host", None)
    host = smtp or getattr(plugin, "host", None)
    if not host or not (smtp or "host" in plugin.template_tokens):
        return []
    if not smtp and getattr(plugin, "mode", None) in PUBLIC_SERVICE_MODES:
        return []
    port = plugin.port or (None if smtp else 443 if plugin.secure else 80)
    return [(host, port)]


# --- a webhook's connection ---------------------------------------------------------------


class _CheckedBackend(httpcore.SyncBackend):
    """Opens each connection to an address `reachable` has just judged."""

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addresses = reachable(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"{_bare(host)} does not resolve ({exc})") from exc
        error: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error or httpcore.ConnectError(f"{_bare(host)} has no address")


def guarded_client(timeout: float) -> httpx.Client:
    """An httpx client that connects only to judged addresses, follows no
    redirect and ignores proxy variables (a proxy would resolve the host again)."""
    transport = httpx.HTTPTransport()
    # httpx (pinned in pyproject) takes no network backend; its pool does.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(), network_backend=_CheckedBackend()
    )
    return httpx.Client(
        transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
    )
