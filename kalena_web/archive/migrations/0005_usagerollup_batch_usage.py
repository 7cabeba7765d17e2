"""Node rollup rows keep the ledger's batch usage and batch cpu throttling rate (null on rows
written before: the live node chart shows a gap there)."""

import kalena_web.inventory.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('archive', '0004_archivecursor'),
    ]

    operations = [
        migrations.AddField(
            model_name='usagerollup',
            name='batch_usage',
            field=kalena_web.inventory.fields.ResourceVectorField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='usagerollup',
            name='batch_throttled_mcpu',
            field=models.FloatField(blank=True, null=True),
        ),
    ]
