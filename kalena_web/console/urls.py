"""Console URLs (all behind login)."""

from django.urls import path

from kalena_web.console import views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/", views.runs, name="runs"),
    path("compare/", views.compare, name="compare"),
    path("runs/<str:run>/", views.overview, name="overview"),
    path("runs/<str:run>/nodes/<str:node>/", views.node, name="node"),
    path("runs/<str:run>/batch/", views.batch, name="batch"),
    path("runs/<str:run>/batch/<path:task>/", views.task, name="task"),
]
