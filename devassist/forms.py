"""What the project-wide pages' forms send, parsed."""

from __future__ import annotations

from django import forms

from devassist.tokens import TOKEN_NAME_MAX


class ApiTokenForm(forms.Form):
    """A new API token's name (stripped; Django's ``CharField`` refuses an empty one, one past
    ``TOKEN_NAME_MAX`` characters and a NUL, each with its own translated message)."""

    name = forms.CharField(max_length=TOKEN_NAME_MAX)
