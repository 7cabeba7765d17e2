"""Console URLs (all behind login)."""

from django.urls import path

from kalena_web.console import live_actions, live_views, views

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
    path("live/<str:cluster>/batch/", live_views.batch_list, name="live_batch"),
    path("live/<str:cluster>/actions/batch/submit", live_actions.batch_submit, name="live_batch_submit"),
    path("live/<str:cluster>/actions/batch/complete/<path:name>", live_actions.batch_complete,
         name="live_batch_complete"),
    path("live/<str:cluster>/actions/batch/delete/<path:name>", live_actions.batch_delete, name="live_batch_delete"),
    path("live/<str:cluster>/actions/agent-token/create", live_actions.agent_token_create,
         name="live_agent_token_create"),
    path("live/<str:cluster>/actions/agent-token/revoke", live_actions.agent_token_revoke,
         name="live_agent_token_revoke"),
    path("tokens/", live_actions.api_tokens, name="api_tokens"),
    path("tokens/create", live_actions.api_token_create, name="api_token_create"),
    path("tokens/revoke", live_actions.api_token_revoke, name="api_token_revoke"),
    path("live/<str:cluster>/batch/<path:name>/", live_views.batch_pod, name="live_batch_pod"),
    path("live/<str:cluster>/evictions/", live_views.evictions, name="live_evictions"),
    path("live/<str:cluster>/waste/", live_views.waste, name="live_waste"),
    path("live/<str:cluster>/replan/", live_views.recommendations, name="live_replan"),
    path("live/<str:cluster>/replan/<int:rec_id>/decision", live_views.decide, name="live_decide"),
]
