"""The URL map of the hooks listener alone (``kalena serve --tls-port``: mutual TLS; never
included in the console's map): kube-apiserver's admission webhook and kube-scheduler's extender."""

from django.urls import path

from kalena_web.kubehooks import views

app_name = "kubehooks"

urlpatterns = [
    path("kubernetes/admission/mutate", views.mutate, name="mutate"),
    path("kubernetes/extender/<str:cluster>/filter", views.extender_filter, name="extender-filter"),
    path("kubernetes/extender/<str:cluster>/prioritize", views.extender_prioritize, name="extender-prioritize"),
    path("kubernetes/extender/<str:cluster>/bind", views.extender_bind, name="extender-bind"),
]

handler404 = views.not_found
