"""The address rule on its own: which addresses are internal, how
NOTIFY_ALLOWED_HOSTS is read and matched, and which host an Apprise URL
connects to (README: Notifications)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paperclip_console.env import split_host
from sandboxes.notifications import addresses
from sandboxes.notifications.delivery import apprise_service

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("169.254.169.254", "a link-local address (a cloud metadata service)"),
        ("169.254.170.2", "a link-local address (a cloud metadata service)"),
        ("fd00:ec2::254", "a private address (a cloud metadata service)"),
        ("100.100.100.200", "a shared (carrier-grade NAT) address (a cloud metadata service)"),
        ("192.0.0.192", "a cloud metadata address"),
        ("127.0.0.1", "a loopback address"),
        ("127.8.9.10", "a loopback address"),
        ("::1", "a loopback address"),
        ("fe80::1", "a link-local address"),
        ("fe80::1%1", "a link-local address"),
        ("10.0.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("192.168.0.1", "a private address"),
        ("fc00::1", "a private address"),
        ("100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("224.0.0.251", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("240.0.0.1", "a private address"),  # reserved, and private to Python
        ("192.0.2.10", "a private address"),  # documentation range
        # IPv6 forms of internal IPv4 addresses.
        ("::ffff:127.0.0.1", "a loopback address"),
        ("::ffff:169.254.169.254", "a link-local address (a cloud metadata service)"),
        ("64:ff9b::a00:1", "a private address"),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", "a loopback address"),  # 6to4 of 127.0.0.1
        ("::127.0.0.1", "a reserved address"),  # IPv4-compatible (deprecated)
    ],
)
def test_internal_addresses_are_named(address, words):
    assert addresses.internal_kind(address) == words


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address):
    assert addresses.internal_kind(address) is None


def test_the_refusal_names_the_host_the_address_and_the_way_out():
    with pytest.raises(addresses.AddressRefused) as literal:
        addresses.reachable("169.254.169.254", 80)
    assert str(literal.value) == (
        "169.254.169.254 is a link-local address (a cloud metadata service); notifications "
        "may not reach internal addresses unless NOTIFY_ALLOWED_HOSTS lists the host"
    )
    with pytest.raises(addresses.AddressRefused, match=r"^localhost resolves to 127\.0\.0\.1, a"):
        addresses.reachable("localhost", 80)
    # Numeric spellings resolve to the same address, and are judged by it.
    for spelled in ("2130706433", "0x7f000001", "127.1", "[::ffff:7f00:1]"):
        with pytest.raises(addresses.AddressRefused, match="loopback"):
            addresses.reachable(spelled, 80)


@pytest.mark.parametrize(
    ("listed", "host", "port", "allowed"),
    [
        (["localhost"], "localhost", 8080, True),  # a bare host: every port
        (["localhost:8080"], "localhost", 8080, True),
        (["localhost:8080"], "localhost", 8081, False),
        (["LOCALHOST."], "localhost", 80, True),
        (["[fd00:ec2::254]:80"], "[fd00:ec2:0::254]", 80, True),
        (["fd00:ec2::254"], "fd00:ec2::254", 443, True),
        (["127.0.0.1:8080"], "localhost", 8080, False),  # the name is listed, not its address
        (["hooks.internal"], "evil.hooks.internal", 443, False),
        ([], "localhost", 80, False),
    ],
)
def test_notify_allowed_hosts_matches_host_or_host_and_port(settings, listed, host, port, allowed):
    settings.NOTIFY_ALLOWED_HOSTS = listed
    assert addresses.listed(host, port) is allowed


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("hooks.internal", ("hooks.internal", None)),
        ("Hooks.Internal:8443", ("hooks.internal", 8443)),
        ("10.0.0.5:80", ("10.0.0.5", 80)),
        ("[FD00:EC2:0::254]:443", ("fd00:ec2::254", 443)),
        ("fd00:ec2::254", ("fd00:ec2::254", None)),
    ],
)
def test_host_entries_are_read(entry, parsed):
    assert split_host(entry) == parsed


@pytest.mark.parametrize(
    "entry", ["https://hooks.internal", "x:abc", "x:0", "x:70000", "[::1]x", "a:b:c", "u@x", ":80"]
)
def test_a_bad_host_entry_is_refused(entry):
    with pytest.raises(ValueError):
        split_host(entry)


@pytest.mark.slow
def test_a_bad_notify_allowed_hosts_stops_the_start_naming_it():
    env = {**os.environ, "NOTIFY_ALLOWED_HOSTS": "hooks.internal, https://10.0.0.5/"}
    env["DJANGO_SETTINGS_MODULE"] = "paperclip_console.test_settings"
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: NOTIFY_ALLOWED_HOSTS lists host or host:port" in done.stderr
    assert "'https://10.0.0.5/'" in done.stderr


@pytest.mark.parametrize(
    ("url", "targets"),
    [
        ("json://10.0.0.1:8080/x", [("10.0.0.1", 8080)]),
        ("jsons://hooks.example.com/x", [("hooks.example.com", 443)]),
        ("xml://[fd00:ec2::254]/x", [("[fd00:ec2::254]", 80)]),
        ("gotify://10.1.1.1/token", [("10.1.1.1", 80)]),
        ("ntfy://127.0.0.1/topic", [("127.0.0.1", 80)]),
        ("mailtos://u:p@example.com?smtp=smtp.internal", [("smtp.internal", 587)]),
        # Services at their own public address: the URL's "host" is a token.
        ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ", []),
        ("discord://1234/abcd", []),
        ("ntfy://my-topic", []),
        ("tgram://123456789:abcdefg_hijklmnop/12315544/", []),
    ],
)
def test_an_apprise_url_is_judged_at_the_host_it_connects_to(url, targets):
    assert addresses.apprise_targets(apprise_service(url)) == targets


def test_apprise_follows_no_redirect_even_when_the_url_asks():
    assert apprise_service("json://hooks.example.com/x?redirect=yes").redirects is False
