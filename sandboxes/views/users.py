"""Users and roles (admins): create a user with a role, send a set-password link,
change a role. The actions are sandboxes/people.py and sandboxes/roles.py."""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes import actions, people
from sandboxes.forms import UserCreateForm
from sandboxes.models import CompanyScope, companies_of
from sandboxes.roles import ASSIGN_ROLES, ROLE_WORDS, ROLES, grant_role, role_of
from sandboxes.views.common import console_view, permission_named, visible_companies


def _users_context(request, *, error: str = "", form=None, link=None) -> dict:
    users = (
        people.manageable_users(request.user)
        .prefetch_related(
            "groups",
            Prefetch("company_scopes", CompanyScope.objects.select_related("company")),
        )
        .order_by("username")
    )
    can_limit = companies_of(request.user) is None
    return {
        "rows": [
            {
                "user": u,
                "role": role_of(u),
                "companies": [s.company for s in u.company_scopes.all()],
                "company_ids": {str(s.company_id) for s in u.company_scopes.all()},
            }
            for u in users
        ],
        # Only an admin who sees every company limits others (README, company scope).
        "can_limit": can_limit,
        "all_companies": visible_companies(request.user) if can_limit else [],
        "roles": ROLE_WORDS,
        "error": error,
        "form": form or UserCreateForm(),
        "link": link,
        "mail": people.mail_configured(),
        "link_days": people.LINK_DAYS,
    }


def _answer(request, context: dict, status: int = 200):
    response = render(request, "sandboxes/users.html", context, status=status)
    if context.get("link") is not None:
        # A set-password link is a password in all but name: never cached.
        response["Cache-Control"] = "no-store"
    return response


@console_view
@permission_named(ASSIGN_ROLES)
@require_GET
def users(request):
    return _answer(request, _users_context(request))


@require_POST
@console_view
@permission_named(ASSIGN_ROLES)
def create_user(request):
    form = UserCreateForm(request.POST)
    if form.is_valid():
        try:
            link = people.create_user(actor=request.user, **form.cleaned_data)
        except actions.ActionRefused as exc:
            field, _, words = str(exc).partition(": ")
            if field.lower() in form.fields:
                form.add_error(field.lower(), words)
            else:
                form.add_error(None, str(exc))
        else:
            return _answer(request, _users_context(request, link=link))
    return _answer(request, _users_context(request, form=form), status=400)


@require_POST
@console_view
@permission_named(ASSIGN_ROLES)
def password_link(request, pk):
    user = get_object_or_404(people.manageable_users(request.user), pk=pk)
    try:
        link = people.send_set_password_link(
            user.pk, actor=request.user, reason=request.POST.get("reason", "")
        )
    except actions.ActionRefused as exc:
        context = _users_context(request, error=f"{user.get_username()}: {exc}")
        return _answer(request, context, status=400)
    return _answer(request, _users_context(request, link=link))


@require_POST
@console_view
@permission_named(ASSIGN_ROLES)
def assign_role(request, pk):
    user = get_object_or_404(people.manageable_users(request.user), pk=pk)
    role = request.POST.get("role", "")
    error = ""
    try:
        reason = actions._note(request.POST.get("reason"))  # storable, under 2,000 characters
    except actions.ActionRefused as exc:
        reason, error = "", f"Reason: {exc}"
    if error:
        pass
    elif role and role not in ROLES:
        error = f"Role: {role!r} is not a role (reviewer, operator or admin)."
    elif not reason:
        error = "Reason: a reason is required."
    elif user.pk == request.user.pk:
        error = "You cannot change your own role; ask another admin."
    elif role_of(user) == role:
        error = f"{user.get_username()} already has {role or 'no'} role; nothing changed."
    if error:
        return _answer(request, _users_context(request, error=error), status=400)
    old, new = grant_role(user, role, actor=request.user, reason=reason)
    messages.success(request, f"{user.get_username()}: {old or 'no role'} → {new or 'no role'}.")
    return redirect("users")


@require_POST
@console_view
@permission_named(ASSIGN_ROLES)
def set_companies(request, pk):
    """Limit a user to the ticked companies (none ticked: every company)."""
    if companies_of(request.user) is not None:
        raise PermissionDenied("an admin limited to some companies cannot change company limits")
    user = get_object_or_404(get_user_model(), pk=pk)
    try:
        old, new = people.set_companies(
            user.pk,
            actor=request.user,
            company_ids=request.POST.getlist("companies"),
            reason=request.POST.get("reason", ""),
        )
    except actions.ActionRefused as exc:
        context = _users_context(request, error=f"{user.get_username()}: {exc}")
        return _answer(request, context, status=400)
    words = f"{len(new)} compan{'y' if len(new) == 1 else 'ies'}" if new else "every company"
    messages.success(request, f"{user.get_username()} now sees {words}.")
    return redirect("users")
