"""URLs kube-apiserver and kube-scheduler call (no login: TLS, reachable only in-cluster)."""

from django.urls import path

from kalena_web.kubehooks import views

app_name = "kubehooks"

urlpatterns = [
    path("kubernetes/admission/mutate", views.mutate, name="mutate"),
    path("kubernetes/extender/<str:cluster>/filter", views.extender_filter, name="extender-filter"),
    path("kubernetes/extender/<str:cluster>/prioritize", views.extender_prioritize, name="extender-prioritize"),
    path("kubernetes/extender/<str:cluster>/bind", views.extender_bind, name="extender-bind"),
]
