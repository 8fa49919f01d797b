"""Login, limited per account and per client address so passwords cannot be
guessed at speed — without letting anyone lock everybody out.

- The client address is REMOTE_ADDR, or, when REMOTE_ADDR is one of the
  trusted proxies (settings.FORWARDED_ALLOW_IPS, the variable gunicorn reads
  too), the right-most X-Forwarded-For entry that is not itself a trusted
  proxy. Behind the documented proxy every request's REMOTE_ADDR is the proxy,
  so counting REMOTE_ADDR locked out every user at once.
- The account is the username as Django authenticates it: NFKC-normalised
  (django.contrib.auth.forms.UsernameField) — and case-folded, so `ｖｉｃｔｉｍ`
  and `Victim` share `victim`'s budget.
- Each password check is counted BEFORE the password is checked — per account
  under a short cache lock (cache.add: Redis SET NX in production), per
  address with an atomic INCR — so parallel attempts cannot all pass a
  check-then-count gap. After LOGIN_FREE_ATTEMPTS checks an account waits
  before each further check, and the wait doubles every time (growing delay,
  capped) instead of a fixed lock; a success clears the account's count.
- Every login form goes through it: the console's and Django admin's.
- Without its cache (Redis down) the limiter cannot count, so it fails closed:
  a password check is refused with a 503 in words, never a 500, and the
  outage is logged once until the cache answers again (README, Production mode).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import threading
import time
import unicodedata
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import wraps

from django.conf import settings
from django.contrib.auth import user_logged_in
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.db import DatabaseError
from django.dispatch import receiver
from django.shortcuts import render
from redis import RedisError

log = logging.getLogger(__name__)

# Kept for callers of the old names: the free checks per account.
MAX_FAILURES = 5
# Counts live this long after the last failed check.
WINDOW_SECONDS = 3600
# What the client is told to wait while the limiter's cache does not answer.
UNAVAILABLE_RETRY_SECONDS = 60


@dataclass(frozen=True)
class Budget:
    free: int  # password checks allowed before delays start
    base_delay: float  # seconds before the first check past the free ones
    max_delay: float

    def delay(self, checks: int) -> float:
        """Seconds to wait after the `checks`-th check before the next one:
        none within the free checks, then base, doubling, capped."""
        if checks < self.free:
            return 0.0
        return float(min(self.base_delay * 2 ** (checks - self.free), self.max_delay))


def _budgets() -> dict[str, Budget]:
    return {
        "user": Budget(
            getattr(settings, "LOGIN_FREE_ATTEMPTS", MAX_FAILURES),
            getattr(settings, "LOGIN_BASE_DELAY_SECONDS", 5),
            getattr(settings, "LOGIN_MAX_DELAY_SECONDS", 900),
        ),
        # One address may try many accounts (a shared office egress), but not many
        # passwords: a looser budget, the same growing delay.
        "ip": Budget(
            getattr(settings, "LOGIN_FREE_ATTEMPTS_PER_ADDRESS", 20),
            getattr(settings, "LOGIN_BASE_DELAY_SECONDS", 5),
            getattr(settings, "LOGIN_MAX_DELAY_SECONDS", 900),
        ),
    }


# --- who is asking ------------------------------------------------------------------


def _networks() -> list:
    nets = []
    for entry in getattr(settings, "FORWARDED_ALLOW_IPS", ["127.0.0.1", "::1"]):
        entry = entry.strip()
        if entry == "*":
            return ["*"]
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue
    return nets


def _ip(value: str):
    value = value.strip()
    if value.startswith("[") and "]" in value:  # [v6]:port
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # v4:port
        value = value.split(":", 1)[0]
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _trusted(address, nets) -> bool:
    if address is None:
        return False
    if nets == ["*"]:
        return True
    return any(address.version == n.version and address in n for n in nets)


def client_ip(request) -> str:
    """The address of the client, as the trusted proxies saw it."""
    remote = request.META.get("REMOTE_ADDR", "") or "unknown"
    nets = _networks()
    if not _trusted(_ip(remote), nets):
        return remote  # anyone can write X-Forwarded-For; only a proxy's counts
    hops = [h for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    for hop in reversed(hops):
        address = _ip(hop)
        if address is None:
            return remote  # a garbled chain: count it against whoever handed it over
        if not _trusted(address, nets):
            return str(address)
    return str(_ip(hops[0])) if hops else remote


def account_key(username: str) -> str:
    """The username as Django authenticates it (NFKC, stripped), case-folded."""
    name = unicodedata.normalize("NFKC", username.strip())
    return unicodedata.normalize("NFKC", name.casefold())[:300]


def _digest(text: str) -> str:
    # Hashed: a typed username may hold spaces and control characters that
    # memcached-style backends refuse in keys (Django warns: CacheKeyWarning).
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# --- counting ------------------------------------------------------------------------


class CountLost(RuntimeError):
    """The cache would not keep a count long enough to increment it."""


# What a cache backend raises when its server is gone: Redis (production),
# memcached's sockets, the database cache; CountLost when it forgets at once.
CACHE_DOWN = (RedisError, OSError, DatabaseError, CountLost)


class _Outage:
    """Whether this process last saw the limiter's cache fail, so an outage is
    logged when it starts and when it ends, not at every attempt in between
    (the lock: gunicorn's threads see an outage together)."""

    def __init__(self):
        self.down = False
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if self.down:
                return
            self.down = True
        log.error(
            "sign-in is refused: the login limiter's cache does not answer (%s: %s)",
            type(exc).__name__,
            exc,
        )

    def answered(self) -> None:
        if not self.down:  # the common case: no lock
            return
        with self._lock:
            if not self.down:
                return
            self.down = False
        log.info("the login limiter's cache answers again; sign-in is open")


_outage = _Outage()


def _incr(key: str) -> int:
    for _ in range(3):
        cache.add(key, 0, WINDOW_SECONDS)
        try:
            return cache.incr(key)
        except ValueError:  # expired between add and incr
            continue
    raise CountLost(f"cannot count login attempts in the cache ({key})")


def _decr(key: str) -> None:
    with suppress(ValueError):
        cache.decr(key)


class Busy(Exception):
    """Another request holds the account's lock for too long."""


@contextmanager
def _locked(key: str):
    """A short mutual exclusion per account (cache.add is atomic: Redis SET NX),
    held only while its count is read and written — not during the check."""
    lock = f"{key}:lock"
    for i in range(200):
        if cache.add(lock, 1, 5):
            break
        time.sleep(0.002 * (1 + i % 5))
    else:
        raise Busy(key)
    try:
        yield
    finally:
        cache.delete(lock)


@dataclass
class Attempt:
    """The reservations one login POST holds; refused: seconds to wait."""

    ip_key: str = ""
    user_key: str = ""
    refused: float = 0.0

    def failed(self) -> None:
        if self.ip_key:
            cache.touch(f"{self.ip_key}:n", WINDOW_SECONDS)

    def succeeded(self) -> None:
        """The account's count starts over; the address's check is given back
        (a busy office logging in is not guessing)."""
        if self.user_key:
            cache.delete_many([f"{self.user_key}:n", f"{self.user_key}:opens"])
        if self.ip_key:
            _decr(f"{self.ip_key}:n")


def reserve(request, username: str) -> Attempt:
    """Count this password check against the address and the account before it
    is made. Refused (and not counted) when either is out of budget."""
    budgets = _budgets()
    ip_key = f"login:ip:{_digest(client_ip(request))}"
    user_key = f"login:user:{_digest(account_key(username))}"

    # The address: a plain atomic ticket; past its budget nothing is checked
    # until an hour passes without a failure from it.
    n = _incr(f"{ip_key}:n")
    if n > budgets["ip"].free:
        _decr(f"{ip_key}:n")
        return Attempt(refused=budgets["ip"].max_delay)

    # The account: counted under its lock, so of any number of parallel
    # attempts exactly as many are checked as would be one after another.
    budget = budgets["user"]
    try:
        with _locked(user_key):
            now = time.time()
            opens = cache.get(f"{user_key}:opens") or 0.0
            if now < opens:
                wait = opens - now
            else:
                wait = 0.0
                checks = (cache.get(f"{user_key}:n") or 0) + 1
                cache.set(f"{user_key}:n", checks, WINDOW_SECONDS)
                delay = budget.delay(checks)
                if delay:
                    cache.set(f"{user_key}:opens", now + delay, WINDOW_SECONDS)
    except Busy:
        wait = 1.0
    if wait:
        _decr(f"{ip_key}:n")
        return Attempt(refused=wait)
    return Attempt(ip_key=ip_key, user_key=user_key)


_LOGGED_IN = "_login_limiter_success"


@receiver(user_logged_in)
def _note_login(sender, request, user, **kwargs):
    if request is not None:
        setattr(request, _LOGGED_IN, True)


def rate_limited_response(request, wait: float, template="registration/login.html"):
    return _refused(request, wait, template, status=429, rate_limited=True)


def unavailable_response(request, template="registration/login.html"):
    """The limiter cannot count (its cache is down): no password is checked."""
    return _refused(request, UNAVAILABLE_RETRY_SECONDS, template, status=503, unavailable=True)


def _refused(request, wait: float, template: str, *, status: int, **flags):
    from django.contrib.auth.forms import AuthenticationForm

    response = render(
        request,
        template,
        {
            "form": AuthenticationForm(request),
            "next": request.POST.get("next", ""),
            "retry_after": math.ceil(wait),
            **flags,
        },
        status=status,
    )
    response["Retry-After"] = str(math.ceil(wait))
    return response


def _settle(attempt: Attempt, outcome) -> None:
    """Book the outcome of a checked password. The check was counted before it
    was made, so a cache that fails now loses only this bookkeeping: the
    response stands."""
    try:
        outcome(attempt)
    except CACHE_DOWN as exc:
        _outage.failed(exc)


def login_limited(view):
    """Wrap a login view: every POST that would check a password is counted
    first and refused inside the delay; a login clears the account's count."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        username = request.POST.get("username", "") if request.method == "POST" else ""
        if not username or not request.POST.get("password"):
            return view(request, *args, **kwargs)  # no password check: the form says why
        try:
            attempt = reserve(request, username)
        except CACHE_DOWN as exc:
            # Fail closed: without a count, checking passwords would be unlimited.
            _outage.failed(exc)
            return unavailable_response(request)
        _outage.answered()
        if attempt.refused:
            return rate_limited_response(request, attempt.refused)
        try:
            response = view(request, *args, **kwargs)
        except BaseException:
            _settle(attempt, Attempt.failed)
            raise
        if getattr(request, _LOGGED_IN, False):
            _settle(attempt, Attempt.succeeded)
        else:
            _settle(attempt, Attempt.failed)
        return response

    return wrapper


class RateLimitedLoginView(auth_views.LoginView):
    @classmethod
    def as_view(cls, **initkwargs):
        return login_limited(super().as_view(**initkwargs))
