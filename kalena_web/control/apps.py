from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "kalena_web.control"
    label = "control"
    verbose_name = "Control loops"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Kalena's Celery app becomes the current app of every process that starts Django (web,
        # worker, beat, `kalena serve`), so shared tasks send to its broker with its settings;
        # importing kalena_web no longer does this (the command line's thin client needs neither)
        import kalena_web.celery  # noqa: F401
