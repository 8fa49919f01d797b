"""Response headers every console answer carries, and crafted-input answers.

- Permissions-Policy: the console needs no camera, microphone, location,
  payment or sensors; say so, so an injected frame or script cannot ask.
- Cache-Control: no-store on everything but static files: console pages and
  API answers hold sandbox ids, audit rows and one-time token values, and a
  shared or back-button cache must not keep them.
- A paging cursor the console did not issue is a 400 naming its parameter.

The Content-Security-Policy itself comes from django-csp (settings.py).
"""

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from sandboxes.paging import BadCursor

PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "publickey-credentials-get",
        "usb",
        "xr-spatial-tracking",
    )
)


class SecurityHeadersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        prefixes = [settings.STATIC_URL, getattr(settings, "MEDIA_URL", "")]
        self.cacheable = tuple("/" + p.lstrip("/") for p in prefixes if p)

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        if not request.path.startswith(self.cacheable):
            response["Cache-Control"] = "no-store"
            response.headers.pop("Expires", None)
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, BadCursor):
            if request.path.startswith("/api/"):
                return JsonResponse({"error": str(exception), "field": exception.param}, status=400)
            return HttpResponse(
                str(exception), status=400, content_type="text/plain; charset=utf-8"
            )
        return None
