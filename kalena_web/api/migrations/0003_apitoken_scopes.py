from django.db import migrations, models


class Migration(migrations.Migration):
    """Tokens gain scopes; tokens made before keep every scope (what they could do before)."""

    dependencies = [("api", "0002_roles")]

    operations = [
        migrations.AddField(model_name="apitoken", name="scopes",
                            field=models.CharField(default="read write approve", max_length=64)),
    ]
