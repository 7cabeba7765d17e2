"""Kalena web: the Django operator console, control loops and command line."""

from kalena_web.celery import app as celery_app

__all__ = ["celery_app"]
