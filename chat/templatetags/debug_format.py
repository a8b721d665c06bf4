"""The debug panel's words in the reader's language. The panel's data (``chat.debug``) names
its entries and filters in English, as the debug API answers and the copied JSON carries them;
the page shows them translated."""

from __future__ import annotations

from django import template
from django.utils.translation import pgettext_lazy

register = template.Library()


#: The words of the labels, looked up in the active language when shown.
_WORDS = {
    "All": pgettext_lazy("debug panel", "All"),
    "User": pgettext_lazy("debug panel", "User"),
    "Model": pgettext_lazy("debug panel", "Model"),
    "Tool": pgettext_lazy("debug panel", "Tool"),
    "Error": pgettext_lazy("debug panel", "Error"),
    "System": pgettext_lazy("debug panel", "System"),
    "Memory": pgettext_lazy("debug panel", "Memory"),
    "Answer": pgettext_lazy("debug panel", "Answer"),
}
_TOOLS = pgettext_lazy("debug panel", "Tools")


@register.filter
def debug_label(label: str) -> str:
    """An entry's label (``User``, ``Model · Tools``, ``Tool · <name>``, ``Memory · <name>``,
    …; ``chat.debug.DebugEntry.label``) or a filter's (``All``, ``User``, …) in the reader's
    language; a tool's or memory's name stays as it is."""
    head, separator, name = label.partition(" · ")
    if head == "Model" and name == "Tools":
        name = str(_TOOLS)
    return f"{_WORDS.get(head, head)}{separator}{name}"
