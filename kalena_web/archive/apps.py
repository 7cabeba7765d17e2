"""Django app configuration for ``kalena_web.archive``."""

from django.apps import AppConfig


class ArchiveConfig(AppConfig):
    name = "kalena_web.archive"
    label = "archive"
    default_auto_field = "django.db.models.BigAutoField"
