# The long-term memory of conversations, moved here from the agent app with its rows: the model
# takes agent.0006's table over, which is then renamed to this app's.

import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0006_memorysummary_to_chat"),
        ("chat", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MemorySummary",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("from_sequence", models.PositiveIntegerField()),
                        ("through_sequence", models.PositiveIntegerField()),
                        ("facts", models.JSONField(default=list)),
                        ("model", models.CharField(blank=True, max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "conversation",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memory_summaries",
                                to="chat.conversation",
                            ),
                        ),
                    ],
                    options={
                        "ordering": ["conversation", "through_sequence"],
                        "db_table": "agent_memorysummary",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("conversation", "through_sequence"),
                                name="memory_summary_unique_end",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="memorysummary", table=None),
    ]
