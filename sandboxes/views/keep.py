"""The page of a "keep it" link (docs/rules.md, kept by the owner): no login,
the link's signature is its only key. GET asks (and writes nothing: mail
scanners open links); the CSRF-protected POST holds, through
`sandboxes/keeping.py`. It never offers approve or destroy; "Open in the
console" leads to the sandbox's page, behind the login as everywhere."""

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods

from sandboxes import keep_links, keeping


def _refused(request, exc: keep_links.LinkRefused):
    return render(
        request,
        "sandboxes/keep_refused.html",
        {"message": str(exc), "status": exc.status},
        status=exc.status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@csrf_protect
def keep(request, token: str):
    now = timezone.now()
    try:
        # The signature first: a forged link is refused without a database read.
        link = keep_links.read(token, now=now)
        if request.method == "POST":  # GET and HEAD only ask
            kept = keeping.keep(link, now=now)
            r = kept.retirement
            return render(
                request,
                "sandboxes/keep.html",
                {"r": r, "issue": r.lease.issue, "kept": kept, "link": link},
            )
        r = keeping.look(link)
    except keep_links.LinkRefused as exc:
        return _refused(request, exc)
    return render(
        request,
        "sandboxes/keep.html",
        {"r": r, "issue": r.lease.issue, "link": link, "keep_days": keep_links.KEEP_FOR.days},
    )
