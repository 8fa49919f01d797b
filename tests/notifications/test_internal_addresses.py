"""Notification channels never reach internal addresses (README: Notifications):
a URL whose host is, or resolves to, a loopback, link-local, private, shared,
reserved or cloud metadata address is refused when the channel is saved and
again when it is sent, and no redirect is followed, unless NOTIFY_ALLOWED_HOSTS
lists the host.

Regression: an admin could save a webhook or Apprise URL at 169.254.169.254
(or any loopback or private address) and the console sent to it."""

import pytest
from django.urls import reverse

from sandboxes.actions import ActionRefused
from sandboxes.models import AuditEvent, NotificationChannel, NotificationDelivery
from sandboxes.notifications import channels, delivery, secrets
from sandboxes.roles import ADMINS
from tests.console.conftest import login
from tests.factories import RetirementFactory, UserFactory

from .conftest import allow

pytestmark = pytest.mark.django_db

# (host as written in a URL, the words the refusal uses for it)
INTERNAL = [
    ("169.254.169.254", "link-local"),  # AWS, GCP, Azure instance metadata
    ("169.254.170.2", "link-local"),  # AWS ECS task credentials
    ("[fd00:ec2::254]", "private"),  # AWS instance metadata over IPv6
    ("127.0.0.1:8080", "loopback"),
    ("[::1]:8080", "loopback"),
    ("10.1.2.3", "private"),
    ("192.168.1.10", "private"),
    ("localhost:8080", "loopback"),  # a name that resolves to loopback
]


@pytest.fixture
def admin(db):
    return UserFactory(username="nadia-admin", groups=[ADMINS])


@pytest.fixture
def record(db):
    return RetirementFactory(lease__issue__key="PAP-22")


def create(record, admin, kind, url, **kwargs):
    return channels.create_channel(
        record.environment_id, actor=admin, name=kwargs.pop("name", "ops"), kind=kind, url=url
    )


def announce(record, key="k1"):
    from django.db import transaction

    from sandboxes.notifications import events

    with transaction.atomic():
        return events.emit("retirement.retired", key=key, retirement=record)


# --- at save ------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "words"), INTERNAL)
@pytest.mark.parametrize("scheme", ["http", "json"])
def test_an_internal_url_is_refused_when_a_channel_is_saved(admin, record, scheme, host, words):
    kind = "webhook" if scheme == "http" else "apprise"
    with pytest.raises(ActionRefused) as refused:
        create(record, admin, kind, f"{scheme}://{host}/latest/meta-data/")
    message = str(refused.value)
    assert message.startswith("url: ") and f"a {words} address" in message
    assert "NOTIFY_ALLOWED_HOSTS" in message
    assert NotificationChannel.objects.count() == 0 and AuditEvent.objects.count() == 0


@pytest.mark.parametrize(
    "url",
    [
        # Apprise's self-hosted services name their host in the URL.
        "xml://169.254.169.254/x",
        "form://[fd00:ec2::254]/x",
        "gotify://10.0.0.7/token",
        "ntfy://127.0.0.1/topic",
        # An email URL's SMTP server.
        "mailtos://user:pass@example.com?smtp=192.168.0.25&to=ops@example.com",
    ],
)
def test_apprise_urls_are_checked_at_the_host_they_connect_to(admin, record, url):
    with pytest.raises(ActionRefused, match=r"^url: .* address"):
        create(record, admin, "apprise", url)
    assert NotificationChannel.objects.count() == 0


def test_the_new_channel_page_puts_the_refusal_on_the_url_field(admin, record):
    response = login(admin).post(
        reverse("channel-create", args=[record.environment_id]),
        {"name": "imds", "kind": "webhook", "url": "http://169.254.169.254/latest/"},
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["url"]
    assert "169.254.169.254 is a link-local address" in errors["url"][0]
    assert "169.254.169.254 is a link-local address" in response.content.decode()
    assert NotificationChannel.objects.count() == 0 and AuditEvent.objects.count() == 0


def test_a_changed_url_is_checked_too_and_the_stored_one_is_kept(admin, record, receiver):
    channel, _ = create(record, admin, "webhook", f"http://{receiver.url}/hook")
    response = login(admin).post(
        reverse("channel-update", args=[channel.pk]),
        {"name": "ops", "url": "http://[::ffff:169.254.169.254]/", "enabled": "on"},
    )
    assert response.status_code == 400
    assert "link-local address" in response.context["form"].errors["url"][0]
    channel.refresh_from_db()
    assert secrets.decrypt(channel.url_encrypted) == f"http://{receiver.url}/hook"
    assert AuditEvent.objects.filter(action="channel.update").count() == 0


def test_a_url_from_an_environment_variable_is_checked_when_it_is_set(admin, record, monkeypatch):
    monkeypatch.setenv("OPS_HOOK_URL", "http://10.20.30.40/hook")
    with pytest.raises(ActionRefused, match=r"^url_env: .*10\.20\.30\.40 is a private address"):
        channels.create_channel(
            record.environment_id, actor=admin, name="env", kind="webhook", url_env="OPS_HOOK_URL"
        )
    assert NotificationChannel.objects.count() == 0


def test_a_listed_host_may_be_internal(admin, record, settings):
    allow(settings, "10.1.2.3", "localhost:8080")
    create(record, admin, "webhook", "http://10.1.2.3:9000/hook", name="a")  # any port
    create(record, admin, "apprise", "json://localhost:8080/x", name="b")
    with pytest.raises(ActionRefused, match="loopback"):
        create(record, admin, "apprise", "json://localhost:8081/x", name="c")  # not that port
    assert NotificationChannel.objects.count() == 2


def test_a_name_that_does_not_resolve_yet_is_saved_and_checked_when_sent(admin, record):
    channel, _ = create(record, admin, "webhook", "https://hooks.example.invalid/x")
    announce(record)
    assert delivery.send_due() == {"pending": 1}  # retried: DNS may answer later
    d = NotificationDelivery.objects.get(channel=channel)
    assert "does not resolve" in d.last_error


# --- at send ------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "scheme"), [("webhook", "http"), ("apprise", "json")])
def test_a_host_no_longer_listed_is_refused_when_sent_and_nothing_is_sent(
    admin, record, receiver, settings, kind, scheme
):
    channel, _ = create(record, admin, kind, f"{scheme}://{receiver.url}/hook")
    settings.NOTIFY_ALLOWED_HOSTS = []
    announce(record)
    assert delivery.send_due() == {"failed": 1}  # refused for good: no retry
    d = NotificationDelivery.objects.get(channel=channel)
    assert (d.status, d.attempts, d.response_code, d.next_attempt_at) == ("failed", 1, None, None)
    assert d.last_error.startswith("refused: 127.0.0.1 is a loopback address")
    assert receiver.requests == []


def test_a_stored_name_that_resolves_to_loopback_is_refused_when_sent(record, receiver):
    # Saved before the check existed (or its DNS changed since): the connection
    # is opened only to an address checked at that moment.
    port = receiver.url.rsplit(":", 1)[1]
    channel = NotificationChannel.objects.create(
        environment=record.environment,
        name="rebound",
        kind="webhook",
        url_encrypted=secrets.encrypt(f"http://localhost:{port}/hook"),
        secret_encrypted=secrets.encrypt(secrets.new_webhook_secret()),
    )
    announce(record)
    assert delivery.send_due() == {"failed": 1}
    d = NotificationDelivery.objects.get(channel=channel)
    assert d.last_error.startswith("refused: localhost resolves to 127.0.0.1, a loopback address")
    assert receiver.requests == []


@pytest.mark.parametrize(("kind", "scheme"), [("webhook", "http"), ("apprise", "json")])
def test_a_redirect_to_an_internal_address_is_not_followed(
    admin, record, receiver, unlisted_receiver, kind, scheme
):
    receiver.status = 302
    receiver.location = f"http://{unlisted_receiver.url}/latest/meta-data/"
    channel, _ = create(record, admin, kind, f"{scheme}://{receiver.url}/hook")
    announce(record)
    assert delivery.send_due() == {"pending": 1}
    d = NotificationDelivery.objects.get(channel=channel)
    assert (d.response_code, d.last_error) == (302, "HTTP 302: redirect not followed")
    assert len(receiver.requests) == 1 and unlisted_receiver.requests == []


def test_an_apprise_url_asking_for_redirects_gets_none(admin, record, receiver, unlisted_receiver):
    receiver.status = 307
    receiver.location = f"http://{unlisted_receiver.url}/"
    create(record, admin, "apprise", f"json://{receiver.url}/hook?redirect=yes")
    announce(record)
    delivery.send_due()
    assert len(receiver.requests) == 1 and unlisted_receiver.requests == []


@pytest.mark.parametrize(("kind", "scheme"), [("webhook", "http"), ("apprise", "json")])
def test_a_listed_host_is_sent_to(admin, record, receiver, settings, kind, scheme):
    port = receiver.url.rsplit(":", 1)[1]
    settings.NOTIFY_ALLOWED_HOSTS = [f"localhost:{port}"]
    create(record, admin, kind, f"{scheme}://localhost:{port}/hook")
    announce(record)
    assert delivery.send_due() == {"delivered": 1}
    assert [r.path for r in receiver.requests] == ["/hook"]


def test_a_webhook_connects_to_the_address_it_judged(
    admin, record, receiver, settings, monkeypatch
):
    """DNS rebinding: a name may answer one address to the check and another to
    the connection. The connection goes to the answer that was judged; a
    second lookup (here: a closed port) would fail the send. A name that
    answers differently each time needs a resolver the test controls, so
    getaddrinfo is replaced for that one name."""
    import socket

    port = int(receiver.url.rsplit(":", 1)[1])
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1"])  # the receiver; any later answer: a closed port

    def rebinding(host, *args, **kwargs):
        if host != "rebind.test":
            return real(host, *args, **kwargs)
        address = next(answers, "127.0.0.2")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    allow(settings, f"rebind.test:{port}")
    create(record, admin, "webhook", f"http://rebind.test:{port}/hook")  # listed: not resolved
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    announce(record)
    assert delivery.send_due() == {"delivered": 1}
    assert [r.headers["Host"] for r in receiver.requests] == [f"rebind.test:{port}"]
