"""Admins' actions on API tokens: create (shown once) and revoke, each checked
and audited like every operator action (sandboxes/actions.py)."""

from django.db import transaction
from django.utils import timezone

from sandboxes import audit
from sandboxes.actions import ActionRefused, _note, _require, _storable
from sandboxes.models import ApiToken, companies_of
from sandboxes.models.choices import TokenScope


@transaction.atomic
def create_token(*, actor, name: str, scope: str, reason: str = "") -> tuple[ApiToken, str]:
    _require(actor, "manage_tokens")
    name = _storable((name or "").strip())
    reason = _note(reason)
    if not name:
        raise ActionRefused("Give the token a name.")
    if len(name) > ApiToken.NAME_MAX:
        raise ActionRefused(f"name: at most {ApiToken.NAME_MAX} characters ({len(name)} given).")
    if scope not in TokenScope.values:
        raise ActionRefused(f"Unknown scope {scope!r}.")
    if scope == TokenScope.INGEST and companies_of(actor) is not None:
        # Ingest writes any company's rows; a token answers for its creator's companies.
        raise ActionRefused(
            "scope: an account limited to some companies cannot create an ingest token."
        )
    token, raw = ApiToken.issue(name, scope, created_by=actor)
    audit.record(
        actor=actor,
        action="token.create",
        obj=token,
        reason=reason,
        before={},
        after={"name": name, "scope": scope, "prefix": token.prefix},
    )
    return token, raw


@transaction.atomic
def revoke_token(token_id, *, actor, reason: str = "") -> ApiToken:
    _require(actor, "manage_tokens")
    reason = _note(reason)
    try:
        token = ApiToken.objects.manageable_by(actor).select_for_update().get(pk=token_id)
    except ApiToken.DoesNotExist:
        raise ActionRefused("No such token.") from None
    if token.revoked_at is not None:
        raise ActionRefused("This token is already revoked.")
    before = {"name": token.name, "scope": token.scope, "revoked_at": None}
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit.record(
        actor=actor,
        action="token.revoke",
        obj=token,
        reason=reason,
        before=before,
        after={**before, "revoked_at": token.revoked_at.isoformat()},
    )
    return token
