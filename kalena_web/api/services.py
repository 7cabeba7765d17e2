"""API token writes and checks (keyword-only arguments)."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from kalena_engine.errors import InputError
from kalena_web.api.models import SCOPES, ApiToken

PREFIX = "kal_"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_scopes(raw) -> tuple[str, ...]:
    """Scopes from a list or a space/comma-separated string, in :data:`SCOPES` order; ``read``
    is always included (a token that cannot read is of no use). Raises :class:`InputError`
    naming an unknown scope."""
    words = raw.replace(",", " ").split() if isinstance(raw, str) else list(raw)
    unknown = [w for w in words if w not in SCOPES]
    if unknown:
        raise InputError(f"unknown scope {unknown[0]!r}", source="API token", field="scopes",
                         accepted=", ".join(SCOPES))
    return tuple(s for s in SCOPES if s in words or s == "read")


def api_token_create(*, user, name: str, scopes=SCOPES) -> tuple[str, ApiToken]:
    """A new token for ``user`` limited to ``scopes`` (within the user's role); returns
    ``(plaintext, row)`` — the plaintext is never stored."""
    chosen = api_token_scopes(scopes)
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(user=user, name=name[:100], prefix=token[:12], digest=_digest(token),
                                  scopes=" ".join(chosen))
    from kalena_web.policy.audit import audit

    audit("token.create", target=f"API token {row.id} ({row.prefix}…) of {user.get_username()}",
          after={"scopes": list(chosen)})
    return token, row


def api_token_revoke(*, token_id: int) -> bool:
    """Revoke a token (an audit entry); returns False when it was unknown or already revoked."""
    from kalena_web.policy.audit import audit

    with transaction.atomic():
        if not ApiToken.objects.filter(id=token_id, revoked_at__isnull=True).update(revoked_at=timezone.now()):
            return False
        row = ApiToken.objects.select_related("user").get(id=token_id)
        audit("token.revoke", target=f"API token {row.id} ({row.prefix}…) of {row.user.get_username()}",
              before={"state": "active"}, after={"state": "revoked"})
    return True


def api_token_user(*, token: str):
    """The active user a bearer token stands for, or None (unknown, revoked, inactive user).
    The user's ``has_perm`` is narrowed to the token's scopes (:func:`scope_for_permission`)."""
    if not token.startswith(PREFIX):
        return None
    row = ApiToken.objects.select_related("user").filter(digest=_digest(token), revoked_at__isnull=True).first()
    if row is None or not row.user.is_active:
        return None
    ApiToken.objects.filter(id=row.id).update(last_used_at=timezone.now())
    user = row.user
    scopes = frozenset(row.scopes.split())
    role_has_perm = user.has_perm

    def has_perm(perm, obj=None):
        return scope_for_permission(perm) in scopes and role_has_perm(perm, obj)

    user.has_perm = has_perm  # this request's user object only
    user.api_token_scopes = scopes
    user.role_has_perm = role_has_perm
    return user


def permission_refusal(user, perm: str, needs_role: str) -> str:
    """Why ``user`` may not use ``perm``: the API token's missing scope when the user's role has
    the permission (``"this API token lacks the 'write' scope …"``), else ``needs_role``."""
    role_has_perm = getattr(user, "role_has_perm", None)
    if role_has_perm is not None and role_has_perm(perm):
        scope = scope_for_permission(perm)
        held = " ".join(sorted(user.api_token_scopes))
        return (f"this API token lacks the {scope!r} scope (its scopes: {held}); "
                f"the user's role allows it: create a token with --scope {scope}")
    return needs_role


PERMISSION_SCOPES = {"replan.approve_replan": "approve"}  # every other Kalena permission is an operator write


def scope_for_permission(perm: str) -> str:
    """The token scope a permission needs: ``approve`` for re-plan decisions, ``write`` otherwise."""
    return PERMISSION_SCOPES.get(perm, "write")
