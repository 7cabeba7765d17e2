"""Policy and audit pages (behind login, as every console page)."""

from django.urls import path

from kalena_web.policy import views

app_name = "policy"

urlpatterns = [
    path("policy/<str:cluster>/", views.policy, name="policy"),
    path("policy/<str:cluster>/import", views.policy_import, name="import"),
    path("policy/<str:cluster>/export", views.policy_export, name="export"),
    path("policy/<str:cluster>/history/", views.history, name="history"),
    path("policy/<str:cluster>/rollback/<int:version>", views.rollback, name="rollback"),
    path("policy/<str:cluster>/calibration/", views.calibration, name="calibration"),
    path("audit/", views.audit, name="audit"),
]
