"""Django app configuration for ``kalena_web.console``."""

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "kalena_web.console"
    label = "console"
    default_auto_field = "django.db.models.BigAutoField"
