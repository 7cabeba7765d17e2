"""The peak predictors' per-workload usage history beside the live reservation (null until a
policy selects a predictor other than the asymmetric rule)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0004_livenodeledger_blueprint'),
    ]

    operations = [
        migrations.AddField(
            model_name='workloadreservation',
            name='history',
            field=models.BinaryField(blank=True, null=True),
        ),
    ]
