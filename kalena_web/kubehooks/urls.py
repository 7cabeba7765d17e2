"""URLs kube-apiserver and kube-scheduler call (no login: TLS, reachable only in-cluster)."""

from django.urls import path

from kalena_web.kubehooks import views

app_name = "kubehooks"

urlpatterns = [
    path("kubernetes/admission/mutate", views.mutate, name="mutate"),
]
