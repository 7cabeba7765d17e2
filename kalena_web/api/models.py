"""API tokens: how scripts and automation call the REST API as a user (docs/design.md §12)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

SCOPES = ("read", "write", "approve")  # read: every GET; write: operator actions; approve: re-plan decisions


class ApiToken(models.Model):
    """A user's API token. Only ``digest`` (SHA-256 hex) is stored; the token is shown once.
    Requests made with it act as ``user``, with that user's permissions (viewer, operator,
    approver) narrowed to the token's ``scopes`` (space-separated, from :data:`SCOPES`): a
    ``read`` token of an approver can read but not submit. A revoked token is refused."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    scopes = models.CharField(max_length=64, default="read write approve")

    class Meta:
        ordering = ["-created_at"]
