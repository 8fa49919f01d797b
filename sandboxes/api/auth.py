"""Bearer-token authentication for the machine API."""

from functools import wraps

from django.http import JsonResponse
from django.utils import timezone

from sandboxes.models import ApiToken


def bearer_token(request) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any
    case), or None without one. The machine API and /metrics both read it."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def token_required(*scopes: str):
    """Authenticate `Authorization: Bearer <token>` and require one of `scopes`.

    401 for a missing or unknown token, 403 for a token of another scope.
    """
    wanted = " or ".join(repr(s) for s in scopes)

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            raw = bearer_token(request)
            token = ApiToken.authenticate(raw) if raw else None
            if token is None:
                response = JsonResponse({"error": "missing or invalid bearer token"}, status=401)
                response["WWW-Authenticate"] = 'Bearer realm="paperclip-console"'
                return response
            if token.scope not in scopes:
                return JsonResponse(
                    {"error": f"this token's scope is {token.scope!r}; {wanted} is required"},
                    status=403,
                )
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
            request.api_token = token
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
