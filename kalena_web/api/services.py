"""API token writes and checks (keyword-only arguments)."""

from __future__ import annotations

import hashlib
import secrets

from django.utils import timezone

from kalena_web.api.models import ApiToken

PREFIX = "kal_"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(*, user, name: str) -> tuple[str, ApiToken]:
    """A new token for ``user``; returns ``(plaintext, row)`` — the plaintext is never stored."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(user=user, name=name[:100], prefix=token[:12], digest=_digest(token))
    return token, row


def api_token_revoke(*, token_id: int) -> bool:
    """Revoke a token; returns False when it was unknown or already revoked."""
    return bool(ApiToken.objects.filter(id=token_id, revoked_at__isnull=True).update(revoked_at=timezone.now()))


def api_token_user(*, token: str):
    """The active user a bearer token stands for, or None (unknown, revoked, inactive user)."""
    if not token.startswith(PREFIX):
        return None
    row = ApiToken.objects.select_related("user").filter(digest=_digest(token), revoked_at__isnull=True).first()
    if row is None or not row.user.is_active:
        return None
    ApiToken.objects.filter(id=row.id).update(last_used_at=timezone.now())
    return row.user
