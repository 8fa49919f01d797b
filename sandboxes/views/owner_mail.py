"""An environment's owner e-mail (README: Owner e-mail): its setting, and the log
of the digests sent to task owners.

Everyone with a console role reads whether it is on and its scheme and host;
admins (edit_policy) change it and read the log, which names owners and their
addresses and says why a digest failed, never what it said."""

from django.contrib import messages
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes.actions import ActionRefused
from sandboxes.forms import OwnerMailForm
from sandboxes.models import Environment, OwnerDigest, OwnerDigestItem, OwnerMail
from sandboxes.notifications import owner_mail as actions
from sandboxes.paging import keyset_page
from sandboxes.views.common import console_view, permission
from sandboxes.views.notifications import DELIVERY_LOG_PERMISSION, _refused

LOG_PAGE_SIZE = 50


def _context(request, env, form=None) -> dict:
    setting = OwnerMail.objects.filter(environment=env).first()
    sees_log = request.user.has_perm(DELIVERY_LOG_PERMISSION)
    page = None
    if sees_log:
        items = OwnerDigestItem.objects.select_related("retirement").order_by("pk")
        page = keyset_page(
            OwnerDigest.objects.filter(environment=env).prefetch_related(
                Prefetch("items", queryset=items)
            ),
            order="-created_at",
            cursor=request.GET.get("after"),
            size=LOG_PAGE_SIZE,
        )
    return {
        "env": env,
        "setting": setting,
        "sees_log": sees_log,
        "page": page,
        "first_page": not request.GET.get("after"),
        "can_edit": request.user.has_perm("sandboxes.edit_policy"),
        "form": form
        or OwnerMailForm(
            initial={
                "url_env": setting.url_env if setting else "",
                "enabled": setting.enabled if setting else False,
            }
        ),
    }


@console_view
@require_GET
def owner_mail(request, pk):
    env = get_object_or_404(Environment.objects.visible_to(request.user), pk=pk)
    return render(request, "sandboxes/owner_mail.html", _context(request, env))


@require_POST
@console_view
@permission("edit_policy")
def owner_mail_edit(request, pk):
    env = get_object_or_404(Environment.objects.visible_to(request.user), pk=pk)
    form = OwnerMailForm(request.POST)
    if form.is_valid():
        try:
            actions.update_owner_mail(env.pk, actor=request.user, **form.cleaned_data)
        except ActionRefused as exc:
            _refused(form, exc)
        else:
            messages.success(request, "Owner e-mail saved.")
            return redirect("owner-mail", pk=env.pk)
    return render(request, "sandboxes/owner_mail.html", _context(request, env, form), status=400)
