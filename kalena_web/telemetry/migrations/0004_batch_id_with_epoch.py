# batch_id varchar(200) → varchar(300): agents now send "<node>:<epoch>:<seq>" (the epoch keeps ids
# unique when a buffer's file is lost). On PostgreSQL widening a varchar changes the catalog
# only: no table rewrite, no index rebuild, a brief ACCESS EXCLUSIVE lock.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0003_operator_manages_agent_tokens'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ingestbatch',
            name='batch_id',
            field=models.CharField(max_length=300),
        ),
    ]
