"""Django app configuration for ``kalena_web.inventory``."""

from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "kalena_web.inventory"
    label = "inventory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models import Field, ForeignObject

        from kalena_web.inventory.lookups import AnyOf

        # ``field__any=values`` (kalena_web.inventory.lookups); a relation's lookups are its own
        Field.register_lookup(AnyOf)
        ForeignObject.register_lookup(AnyOf)
