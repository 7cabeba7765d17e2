"""Kalena web: the Django operator console, control loops and command line.

``kalena_web.celery_app`` is the Celery application (``celery -A kalena_web``); it is loaded on
first use, and by the control app when Django starts (so every ``shared_task`` binds to it), not
by importing this package: the command line's thin client (``kalena batch --server``) imports
``kalena_web.cli`` without Celery or Django.
"""

from __future__ import annotations

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from kalena_web.celery import app

        return app
    raise AttributeError(f"module 'kalena_web' has no attribute {name!r}")
