"""REST API authentication: the console session, or ``Authorization: Bearer <API token>``."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from kalena_web.api.services import api_token_user


class ApiTokenAuth(HttpBearer):
    """Bearer API tokens (``kal_…``); the request then acts as the token's user."""

    def authenticate(self, request: HttpRequest, token: str):
        user = api_token_user(token=token)
        if user is not None:
            request.user = user
        return user
