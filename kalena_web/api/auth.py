"""REST API authentication: the console session, or ``Authorization: Bearer <API token>``."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from kalena_web.api.services import api_token_user


class ApiTokenAuth(HttpBearer):
    """Bearer API tokens (``kal_…``); the request then acts as the token's user, its
    permissions narrowed to the token's scopes."""

    def authenticate(self, request: HttpRequest, token: str):
        user = api_token_user(token=token)
        if user is not None:
            request.user = user
        return user


class ConsoleSessionAuth(SessionAuth):
    """The console's login session. An anonymous request is simply not authenticated here (so
    the API answers 401 ``unauthenticated``), instead of django-ninja's 403 "CSRF check Failed",
    which it raises before even looking at the session. A logged-in session's writes still need
    the CSRF token."""

    def __call__(self, request: HttpRequest):
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)
