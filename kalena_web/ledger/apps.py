"""Django app configuration for ``kalena_web.ledger``."""

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "kalena_web.ledger"
    label = "ledger"
    default_auto_field = "django.db.models.BigAutoField"
