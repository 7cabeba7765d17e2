from django.apps import AppConfig


class KubehooksConfig(AppConfig):
    name = "kalena_web.kubehooks"
    label = "kubehooks"
    default_auto_field = "django.db.models.BigAutoField"
