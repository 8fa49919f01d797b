"""Login with a small cache-based limit on failed attempts, per client address
and per username, so passwords cannot be guessed at speed."""

import hashlib

from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.shortcuts import render

MAX_FAILURES = 5
WINDOW_SECONDS = 300


def _client(request) -> str:
    return request.META.get("REMOTE_ADDR", "unknown")


def _keys(request) -> list[str]:
    username = (request.POST.get("username") or "").strip().lower()[:150]
    keys = [f"login-fail:ip:{_client(request)}"]
    if username:
        # Hashed: a typed username may hold spaces and control characters that
        # memcached-style backends refuse in keys (Django warns: CacheKeyWarning).
        keys.append(f"login-fail:user:{hashlib.sha256(username.encode()).hexdigest()}")
    return keys


def _blocked(request) -> bool:
    counts = cache.get_many(_keys(request))
    return any(n >= MAX_FAILURES for n in counts.values())


def _note_failure(request) -> None:
    for key in _keys(request):
        if cache.add(key, 1, WINDOW_SECONDS):
            continue
        try:
            cache.incr(key)
        except ValueError:
            cache.set(key, 1, WINDOW_SECONDS)


class RateLimitedLoginView(auth_views.LoginView):
    def post(self, request, *args, **kwargs):
        if _blocked(request):
            return render(
                request,
                "registration/login.html",
                {
                    "form": self.get_form(),
                    "next": request.POST.get("next", ""),
                    "rate_limited": True,
                },
                status=429,
            )
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        _note_failure(self.request)
        return super().form_invalid(form)

    def form_valid(self, form):
        cache.delete_many(_keys(self.request))
        return super().form_valid(form)
