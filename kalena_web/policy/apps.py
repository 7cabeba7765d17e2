from django.apps import AppConfig


class PolicyConfig(AppConfig):
    name = "kalena_web.policy"
    label = "policy"
    default_auto_field = "django.db.models.BigAutoField"
