"""The operator and approver roles (api/0002_roles) may create and revoke agent tokens."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def grant(apps, schema_editor):
    app_config = apps.get_app_config("telemetry")
    app_config.models_module = True
    create_permissions(app_config, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    permission = Permission.objects.get(content_type__app_label="telemetry", codename="manage_agent_tokens")
    for group in Group.objects.filter(name__in=["operator", "approver"]):
        group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0002_agent_token_permission"), ("api", "0002_roles")]
    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
