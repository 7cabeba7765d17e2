"""Telemetry console URLs (behind the console's login)."""

from django.urls import path

from kalena_web.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("live/<str:cluster>/agents/", views.agents, name="agents"),
]
