"""A real SMTP server on loopback (aiosmtpd) that keeps every message it accepts,
and can be shut and opened again on the same port (an SMTP outage).

Owner e-mail reaches loopback only where NOTIFY_ALLOWED_HOSTS lists it: the
fixture lists exactly this server's host:port (README: Owner e-mail)."""

from __future__ import annotations

import email
import socket
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.policy import default

from aiosmtpd.controller import Controller

HOST = "127.0.0.1"


@dataclass
class Mail:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage

    @property
    def body(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        assert part is not None, "the digest has a text/plain body"
        return part.get_content().replace("\r\n", "\n")  # SMTP sends CRLF lines


@dataclass
class Mailbox:
    port: int
    mails: list[Mail] = field(default_factory=list)
    controller: Controller | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def url(self, scheme: str = "mailto", sender: str = "console@example.com") -> str:
        return f"{scheme}://{self.address}?from={sender}"

    def open(self) -> None:
        self.controller = Controller(_Keep(self), hostname=HOST, port=self.port)
        self.controller.start()

    def shut(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


class _Keep:
    def __init__(self, box: Mailbox):
        self.box = box

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.original_content, policy=default)
        assert isinstance(message, EmailMessage)
        self.box.mails.append(Mail(envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]
