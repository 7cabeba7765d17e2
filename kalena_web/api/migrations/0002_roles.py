"""Create the viewer, operator and approver groups (docs/design.md §12)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLES = {
    "viewer": (),
    "operator": (("scheduling", "operate_batch"),),
    "approver": (("scheduling", "operate_batch"), ("replan", "approve_replan")),
}


def create_roles(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, perms in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set([Permission.objects.get(content_type__app_label=a, codename=c) for a, c in perms])


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
        ("scheduling", "0002_alter_batchpod_options"),
        ("replan", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]
    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
