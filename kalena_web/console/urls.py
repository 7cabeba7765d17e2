"""Console URLs (all behind login)."""

from django.urls import path

from kalena_web.console import live_views, views

app_name = "console"

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/", views.runs, name="runs"),
    path("compare/", views.compare, name="compare"),
    path("runs/<str:run>/", views.overview, name="overview"),
    path("runs/<str:run>/nodes/<str:node>/", views.node, name="node"),
    path("runs/<str:run>/batch/", views.batch, name="batch"),
    path("runs/<str:run>/batch/<path:task>/", views.task, name="task"),
    path("live/", live_views.clusters, name="live"),
    path("live/<str:cluster>/", live_views.cluster, name="live_cluster"),
    path("live/<str:cluster>/nodes/<str:node>/", live_views.node, name="live_node"),
    path("live/<str:cluster>/pending/", live_views.pending, name="live_pending"),
    path("live/<str:cluster>/batch/<path:name>/", live_views.batch_pod, name="live_batch_pod"),
    path("live/<str:cluster>/evictions/", live_views.evictions, name="live_evictions"),
    path("live/<str:cluster>/replan/", live_views.recommendations, name="live_replan"),
    path("live/<str:cluster>/replan/<int:rec_id>/decision", live_views.decide, name="live_decide"),
]
