"""Django app configuration for ``kalena_web.inventory``."""

from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "kalena_web.inventory"
    label = "inventory"
    default_auto_field = "django.db.models.BigAutoField"
