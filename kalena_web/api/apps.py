from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "kalena_web.api"
    label = "api"
    verbose_name = "REST API"
    default_auto_field = "django.db.models.BigAutoField"
