"""Encryption of channel URLs and signing secrets at rest.

Fernet (AES-128-CBC + HMAC-SHA256, from `cryptography`) with a key derived from
SECRET_KEY by HKDF-SHA256, so no second key has to be managed. SECRET_KEY_FALLBACKS
keep decrypting what older keys encrypted (MultiFernet): rotate SECRET_KEY,
keep the old one as a fallback until every channel was saved again.
"""

from __future__ import annotations

import base64
import os
import secrets as _random

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_INFO = b"paperclip-console notification channel secrets v1"
WEBHOOK_SECRET_PREFIX = "whsec_"


class SecretUnavailable(Exception):
    """A stored value cannot be decrypted, or its environment variable is unset."""


def _fernet_key(secret_key: str) -> bytes:
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        secret_key.encode()
    )
    return base64.urlsafe_b64encode(raw)


def _fernet() -> MultiFernet:
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([Fernet(_fernet_key(k)) for k in keys if k])


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretUnavailable(
            "a stored channel secret cannot be decrypted (was SECRET_KEY changed "
            "without keeping the old one in SECRET_KEY_FALLBACKS?)"
        ) from None


def resolve(encrypted: str, env_name: str, what: str) -> str:
    """The clear value: decrypted, or read from the named environment variable."""
    if env_name:
        value = os.environ.get(env_name, "")
        if not value:
            raise SecretUnavailable(f"the environment variable {env_name} for the {what} is unset")
        return value
    if not encrypted:
        raise SecretUnavailable(f"no {what} is configured")
    return decrypt(encrypted)


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: whsec_ + base64 of 32 random bytes."""
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(_random.token_bytes(32)).decode()
