"""Notification channels of an environment, and each channel's delivery log.

Everyone with a console role reads the channels (no URL or secret is ever
rendered); admins (edit_policy) create, change, rotate, test and delete them,
and only they read the delivery log (README: Notifications)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes.actions import ActionRefused
from sandboxes.forms import ChannelEditForm, ChannelForm
from sandboxes.models import (
    Environment,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
)
from sandboxes.notifications import channels as actions
from sandboxes.paging import keyset_page
from sandboxes.views.common import console_view, permission

LOG_PAGE_SIZE = 50
# The log says what each receiver answered and why a send failed: it is for
# the admins who configure channels, like the channels' forms.
DELIVERY_LOG_PERMISSION = "sandboxes.edit_policy"


def _channels(request):
    """The channels of the environments the user sees; another company's
    environment's channel is a 404 (README, company scope)."""
    visible = Environment.objects.visible_to(request.user)
    return NotificationChannel.objects.filter(environment__in=visible)


def _refused(form, exc: ActionRefused) -> None:
    """The refusal on the field it names ("url: …"), else above the form."""
    field, sep, _ = str(exc).partition(": ")
    form.add_error(field if sep and field in form.fields else None, str(exc))


def _channels_context(request, env, form=None, shown_secret="", created=None) -> dict:
    return {
        "env": env,
        "channels": NotificationChannel.objects.filter(environment=env).order_by("name"),
        "form": form or ChannelForm(),
        "can_edit": request.user.has_perm("sandboxes.edit_policy"),
        "shown_secret": shown_secret,
        "created": created,
    }


@console_view
@require_GET
def channels(request, pk):
    env = get_object_or_404(Environment.objects.visible_to(request.user), pk=pk)
    return render(request, "sandboxes/channels.html", _channels_context(request, env))


@require_POST
@console_view
@permission("edit_policy")
def channel_create(request, pk):
    env = get_object_or_404(Environment.objects.visible_to(request.user), pk=pk)
    form = ChannelForm(request.POST)
    if form.is_valid():
        try:
            channel, shown = actions.create_channel(env.pk, actor=request.user, **form.cleaned_data)
        except ActionRefused as exc:
            _refused(form, exc)
        else:
            if not shown:
                messages.success(request, f"Channel {channel.name} added.")
                return redirect("channels", pk=env.pk)
            # The signing secret is shown in this response only; never cached.
            response = render(
                request,
                "sandboxes/channels.html",
                _channels_context(request, env, shown_secret=shown, created=channel),
            )
            response["Cache-Control"] = "no-store"
            return response
    context = _channels_context(request, env, form=form)
    return render(request, "sandboxes/channels.html", context, status=400)


def _detail_context(request, channel, form=None, shown_secret="") -> dict:
    sees_log = request.user.has_perm(DELIVERY_LOG_PERMISSION)
    page = None
    if sees_log:
        page = keyset_page(
            NotificationDelivery.objects.filter(
                channel=channel, event__in=NotificationEvent.objects.visible_to(request.user)
            ).select_related("event"),
            order="-created_at",
            cursor=request.GET.get("after"),
            size=LOG_PAGE_SIZE,
        )
    return {
        "channel": channel,
        "env": channel.environment,
        "sees_log": sees_log,
        "page": page,
        "first_page": not request.GET.get("after"),
        "form": form
        or ChannelEditForm(
            initial={
                "name": channel.name,
                "url_env": channel.url_env,
                "secret_env": channel.secret_env,
                "events": channel.events,
                "enabled": channel.enabled,
            }
        ),
        "can_edit": request.user.has_perm("sandboxes.edit_policy"),
        "shown_secret": shown_secret,
    }


@console_view
@require_GET
def channel_detail(request, pk):
    channel = get_object_or_404(_channels(request).select_related("environment"), pk=pk)
    return render(request, "sandboxes/channel_detail.html", _detail_context(request, channel))


@require_POST
@console_view
@permission("edit_policy")
def channel_update(request, pk):
    channel = get_object_or_404(_channels(request), pk=pk)
    form = ChannelEditForm(request.POST)
    if form.is_valid():
        try:
            actions.update_channel(channel.pk, actor=request.user, **form.cleaned_data)
        except ActionRefused as exc:
            _refused(form, exc)
        else:
            messages.success(request, "Channel saved.")
            return redirect("channel-detail", pk=channel.pk)
    context = _detail_context(request, channel, form=form)
    return render(request, "sandboxes/channel_detail.html", context, status=400)


@require_POST
@console_view
@permission("edit_policy")
def channel_rotate(request, pk):
    channel = get_object_or_404(_channels(request), pk=pk)
    try:
        if request.POST.get("confirm") != "yes":
            # Every receiver stops verifying at once: the admin says they mean it.
            raise ActionRefused("Confirm: tick that the old secret stops working now.")
        channel, shown = actions.rotate_secret(
            channel.pk, actor=request.user, reason=request.POST.get("reason", "")
        )
    except ActionRefused as exc:
        context = _detail_context(request, channel)
        context["rotate_error"] = str(exc)
        return render(request, "sandboxes/channel_detail.html", context, status=400)
    response = render(
        request,
        "sandboxes/channel_detail.html",
        _detail_context(request, channel, shown_secret=shown),
    )
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@console_view
@permission("edit_policy")
def channel_test(request, pk):
    channel = get_object_or_404(_channels(request), pk=pk)
    try:
        delivery = actions.send_test(channel.pk, actor=request.user)
    except ActionRefused as exc:
        messages.error(request, str(exc))
    else:
        if delivery.status == "delivered":
            messages.success(request, "Test notification delivered.")
        else:
            messages.error(
                request,
                f"Test notification not delivered: {delivery.last_error or delivery.status}",
            )
    return redirect("channel-detail", pk=channel.pk)


@require_POST
@console_view
@permission("edit_policy")
def channel_delete(request, pk):
    channel = get_object_or_404(_channels(request), pk=pk)
    env_pk = channel.environment_id
    try:
        actions.delete_channel(
            channel.pk, actor=request.user, reason=request.POST.get("reason", "")
        )
    except ActionRefused as exc:
        messages.error(request, str(exc))
        return redirect("channel-detail", pk=channel.pk)
    messages.success(request, f"Channel {channel.name} deleted.")
    return redirect("channels", pk=env_pk)
