"""Errors under ``/api/``: always JSON ``{"code": …, "detail": …}``, never an HTML page.

``code`` is machine-readable and stable; ``detail`` is for people. The codes by status:

====  ======================  ==========================================================
400   ``invalid_input``       a value the API understood but refuses (names the field)
401   ``unauthenticated``     no session and no valid ``Authorization: Bearer kal_…``
403   ``forbidden``           the role or the token's scope does not allow the call
404   ``not_found``           no such cluster, pod, run, … or no such URL under /api/
405   ``method_not_allowed``  the URL exists, the method does not (``Allow`` lists them)
409   ``conflict``            the object's state forbids the call (completing a pending pod)
413   ``body_too_large``      body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes
422   ``validation_failed``   the body or a parameter does not match the schema; ``errors``
                              lists ``{"loc", "msg", "type"}`` with ``loc`` such as
                              ``["body", "priority"]``
429   ``throttled``
500   ``internal_error``      a bug: logged with its traceback, never shown
502   ``orchestrator_failed`` the orchestrator refused what the call needed
====  ======================  ==========================================================

:class:`ApiError` carries a more specific code where one helps automation
(``ApiError(409, "…", code="pod_pending")``) and extra fields (``differing=[…]``).
:class:`ApiErrorMiddleware` turns what Django answers outside django-ninja (unknown URL, wrong
method, oversize body, CSRF, a NUL in the URL) into the same shape.

Every operation declares the statuses it can answer with :func:`answers`, so that the OpenAPI
schema lists each of them with its body (:class:`ErrorOut`, :class:`ValidationErrorOut`).
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, ValidationError

log = logging.getLogger(__name__)

CODES: dict[int, str] = {
    400: "invalid_input", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    409: "conflict", 413: "body_too_large", 422: "validation_failed", 429: "throttled", 500: "internal_error",
    502: "orchestrator_failed", 503: "unavailable",
}
API_PREFIX = "/api/"


class ApiError(HttpError):
    """An HTTP error with an explicit machine-readable ``code`` (default: by status, :data:`CODES`)
    and ``extra`` fields for the body (``differing=["priority"]``)."""

    def __init__(self, status_code: int, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(status_code, message)
        self.code = code or CODES.get(status_code, "error")
        self.extra = extra


class ErrorOut(Schema):
    """The body of every error answer."""

    code: str = Field(description="machine-readable, stable: invalid_input, not_found, conflict, …")
    detail: str = Field(description="for people: what was wrong, naming the field, and what is accepted")


class ConflictOut(ErrorOut):
    """A 409: the object's state forbids the call, or a submit names an existing pod with another
    spec (``differing`` lists the fields that differ, e.g. ``["priority", "request"]``)."""

    differing: list[str] | None = None


class FieldErrorOut(Schema):
    loc: list[str | int] = Field(description='where: ["body", "priority"], ["query", "sort"], ["path", "rec_id"]')
    msg: str
    type: str


class ValidationErrorOut(ErrorOut):
    """A 422: the body or a parameter does not match the schema."""

    errors: list[FieldErrorOut]


ERROR_BODIES: dict[int, type[Schema]] = {409: ConflictOut, 422: ValidationErrorOut}
#: answered by every operation: a NUL in the URL or an unreadable body (400), no credentials (401),
#: a parameter or body outside the schema (422)
ALWAYS = (400, 401, 422)


def answers(ok: dict[int, Any], *errors: int) -> dict[int, Any]:
    """The ``response=`` of one operation: its success answers ``ok`` and every error status it
    can answer — :data:`ALWAYS` plus ``errors`` — each with its body schema, so that the OpenAPI
    schema says exactly what the operation answers. ``answers({200: ClusterOut}, 404)`` →
    ``{200: ClusterOut, 400: ErrorOut, 401: ErrorOut, 404: ErrorOut, 422: ValidationErrorOut}``."""
    unknown = [s for s in errors if s not in CODES]
    assert not unknown, f"statuses without an error code: {unknown}"
    return {**ok, **{s: ERROR_BODIES.get(s, ErrorOut) for s in sorted({*ALWAYS, *errors})}}


def error_body(status: int, detail: str, *, code: str | None = None, **extra) -> dict:
    return {"code": code or CODES.get(status, "error"), "detail": detail, **extra}


def clean_loc(loc) -> list:
    """A validation error location without django-ninja's doubled parameter name:
    ``("body", "body", "name")`` → ``["body", "name"]`` (the body parameter is called ``body``)."""
    loc = list(loc)
    if len(loc) >= 2 and loc[0] == "body" and loc[1] == "body":
        del loc[1]
    return loc


def _validation_detail(errors: list[dict]) -> tuple[str, list[dict]]:
    cleaned = [{"loc": clean_loc(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
               for e in errors]
    text = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or e['loc'][0] if e['loc'] else 'request'}: {e['msg']}"
                     for e in cleaned[:5])
    return text + ("; …" if len(cleaned) > 5 else ""), cleaned


def install_error_handlers(api: NinjaAPI) -> None:
    """Register JSON handlers for every exception a view can raise."""

    def respond(request: HttpRequest, status: int, body: dict, headers: dict | None = None) -> HttpResponse:
        response = api.create_response(request, body, status=status)
        for k, v in (headers or {}).items():
            response[k] = v
        return response

    @api.exception_handler(ValidationError)
    def validation(request, exc: ValidationError):
        text, errors = _validation_detail(exc.errors)
        return respond(request, 422, error_body(422, text, errors=errors))

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request, exc):
        sent = request.headers.get("Authorization", "")
        if sent.lower().startswith("bearer "):   # a script's token, refused: say so, not "log in"
            detail = ("the API token sent is not valid (unknown, revoked or expired): create one on the "
                      "console's API tokens page or with `kalena api-token create USER --name NAME`")
            header = 'Bearer realm="kalena", error="invalid_token"'
        else:
            detail, header = "log in, or send Authorization: Bearer <API token>", 'Bearer realm="kalena"'
        return respond(request, 401, error_body(401, detail), {"WWW-Authenticate": header})

    @api.exception_handler(AuthorizationError)
    def forbidden(request, exc):
        return respond(request, 403, error_body(403, str(exc.message)))

    @api.exception_handler(HttpError)
    def http_error(request, exc: HttpError):
        detail = str(exc.message)
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):  # django-ninja's unreadable body
            detail = f"the request body is not JSON ({exc.__cause__})"
        return respond(request, exc.status_code, error_body(exc.status_code, detail, code=getattr(exc, "code", None),
                                                            **getattr(exc, "extra", {})))

    @api.exception_handler(Http404)
    def not_found(request, exc):
        return respond(request, 404, error_body(404, str(exc) or "not found"))

    @api.exception_handler(PermissionDenied)
    def denied(request, exc):
        return respond(request, 403, error_body(403, str(exc) or "forbidden"))

    @api.exception_handler(RequestDataTooBig)
    def too_big(request, exc):
        return respond(request, 413, _too_big_body())

    @api.exception_handler(Exception)
    def internal(request, exc):
        log.exception("unhandled error in %s %s", request.method, request.path)
        return respond(request, 500, error_body(500, "internal error (logged on the server)"))


def _too_big_body() -> dict:
    from django.conf import settings

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_body(413, f"the request body is larger than the {limit}-byte limit (DATA_UPLOAD_MAX_MEMORY_SIZE)")


class ApiErrorMiddleware:
    """Under ``/api/``: an error answered outside django-ninja (Django's 404 for an unknown URL,
    405 ``HttpResponseNotAllowed``, CSRF 403, the NUL-byte 400, an oversize body) becomes the
    JSON error body; a JSON answer passes untouched. Sits right after the probe middleware."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        try:
            response = self.get_response(request)
        except RequestDataTooBig:
            return JsonResponse(_too_big_body(), status=413)
        if response.status_code < 400 or response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        detail = _plain_detail(request, response)
        replaced = JsonResponse(error_body(status, detail), status=status)
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if header in response:
                replaced[header] = response[header]
        return replaced


def _plain_detail(request: HttpRequest, response: HttpResponse) -> str:
    status = response.status_code
    if status == 404:
        return f"no API endpoint at {request.path}"
    if status == 405:
        return f"{request.method} is not allowed on {request.path}; allowed: {response.get('Allow', 'none')}"
    if status == 403:
        return "forbidden (a session write needs the CSRF token; scripts use Authorization: Bearer <API token>)"
    if status == 400 and b"<" not in response.content[:1]:
        text = response.content.decode(errors="replace").strip()
        if text and len(text) < 500 and "<html" not in text.lower():
            return text
    return {400: "bad request", 413: "request body too large"}.get(status, f"HTTP {status}")


__all__ = ["ApiError", "ApiErrorMiddleware", "CODES", "ConflictOut", "ErrorOut", "ValidationErrorOut", "answers",
           "clean_loc", "error_body", "install_error_handlers"]
