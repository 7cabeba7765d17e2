"""The operator and approver roles may tune policy; the audit log is append-only on
PostgreSQL (a trigger refuses UPDATE and DELETE of ``policy_auditentry`` rows)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def grant(apps, schema_editor):
    app_config = apps.get_app_config("policy")
    app_config.models_module = True
    create_permissions(app_config, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    permission = Permission.objects.get(content_type__app_label="policy", codename="tune_policy")
    for group in Group.objects.filter(name__in=["operator", "approver"]):
        group.permissions.add(permission)


APPEND_ONLY = """
CREATE OR REPLACE FUNCTION kalena_audit_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'the audit log is append-only: % of an entry is refused', TG_OP;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER policy_auditentry_append_only BEFORE UPDATE OR DELETE ON policy_auditentry
  FOR EACH ROW EXECUTE FUNCTION kalena_audit_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS policy_auditentry_append_only ON policy_auditentry;
DROP FUNCTION IF EXISTS kalena_audit_append_only();
"""


def append_only(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:  # no parameters: the '%' stays plpgsql's
            cursor.execute(APPEND_ONLY)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("policy", "0001_initial"), ("api", "0002_roles")]
    operations = [migrations.RunPython(grant, migrations.RunPython.noop),
                  migrations.RunPython(append_only, drop)]
