"""Each live node ledger's batch usage (Σ u of batch) and its batch pods' cpu throttling rate, for
the live node chart's production / batch split and its "Batch throttled" series (null until the
estimation loop next recomputes the ledger)."""

import kalena_web.inventory.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0005_workloadreservation_history'),
    ]

    operations = [
        migrations.AddField(
            model_name='livenodeledger',
            name='batch_usage',
            field=kalena_web.inventory.fields.ResourceVectorField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='livenodeledger',
            name='batch_throttled_mcpu',
            field=models.FloatField(blank=True, null=True),
        ),
    ]
