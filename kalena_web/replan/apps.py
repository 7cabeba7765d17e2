from django.apps import AppConfig


class ReplanConfig(AppConfig):
    name = "kalena_web.replan"
    label = "replan"
    verbose_name = "Re-plan recommendations"
    default_auto_field = "django.db.models.BigAutoField"
