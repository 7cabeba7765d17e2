"""The blueprint check on live state (docs/design.md §6): each node's blueprint production set, and the
last estimation pass's findings. Existing ledgers record the production placed on them now."""

from django.db import migrations, models


def record_blueprints(apps, schema_editor):
    LiveNodeLedger = apps.get_model("ledger", "LiveNodeLedger")
    Workload = apps.get_model("inventory", "Workload")
    placed: dict[int, list[int]] = {}
    for wid, node_id in Workload.objects.filter(kind="production", node__isnull=False).values_list("id", "node_id"):
        placed.setdefault(node_id, []).append(wid)
    for ledger in LiveNodeLedger.objects.all().only("id", "node_id"):
        LiveNodeLedger.objects.filter(id=ledger.id).update(blueprint_workloads=sorted(placed.get(ledger.node_id, [])))


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0003_cluster_workloads_document_workload_constraints'),
        ('ledger', '0003_estimationrun'),
    ]

    operations = [
        migrations.AddField(
            model_name='livenodeledger',
            name='blueprint_workloads',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='livenodeledger',
            name='blueprint_violations',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='livenodeledger',
            name='blueprint_checked_s',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(record_blueprints, migrations.RunPython.noop),
    ]
