# The long-term memory of conversations moves to the chat app (chat.0002 takes the table over).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0005_run_lease"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="MemorySummary")],
            database_operations=[],
        ),
    ]
