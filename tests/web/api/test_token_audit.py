"""API tokens are tokens too: creating and revoking one is an audit entry (issue 15: "token
create/revoke"), naming the token and its user, never its secret."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from kalena_web.api.services import api_token_create, api_token_revoke
from kalena_web.policy.models import AuditEntry

pytestmark = pytest.mark.django_db


def test_api_token_create_and_revoke_are_audited() -> None:
    user = User.objects.create_user("tok-owner", password="x" * 12)
    plaintext, row = api_token_create(user=user, name="automation")
    assert api_token_revoke(token_id=row.id)
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "target"))
    assert [a for a, _ in entries] == ["token.create", "token.revoke"]
    for _, target in entries:
        assert f"API token {row.id}" in target and "tok-owner" in target and plaintext not in target
    assert not api_token_revoke(token_id=row.id)  # already revoked: nothing more is recorded
    assert AuditEntry.objects.count() == 2
