from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "kalena_web.scheduling"
    label = "scheduling"
    verbose_name = "Batch scheduling"
    default_auto_field = "django.db.models.BigAutoField"
