"""Telemetry: agent tokens, ingest of agent messages, stored samples and mitigation events."""
from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "kalena_web.telemetry"
    label = "telemetry"
    verbose_name = "Agent telemetry"
    default_auto_field = "django.db.models.BigAutoField"
