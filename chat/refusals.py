"""What the chat page says when it refuses something (a message not sent, an action shown as a
toast, a rename), in the reader's language.

A domain error's ``message`` stays English: it is what the REST API's error envelope, the logs
and a run's events carry. The page words a refusal in one of two ways (docs/i18n.md):

- a message that is the same every time is marked where it is raised with ``gettext_noop``
  (which leaves it English) and looked up in the catalogue here;
- a message that carries values (an id, a limit, a name) is worded here by the error's
  ``code``, with the values its ``details`` hold.

An error this module has no words for is shown with its English message.
"""

from __future__ import annotations

from django.utils.formats import number_format
from django.utils.translation import gettext, gettext_lazy

from agent.exceptions import CollectionNotFound
from chat.exceptions import ConversationNotFound, MessageNotFound, MessageTooLarge
from devassist.exceptions import DomainError

#: The words of the refusals whose English message carries values, by code; a ``%(name)s``
#: is the error's ``details[name]``.
_BY_CODE = {
    MessageTooLarge.code: gettext_lazy("The message is longer than %(max_chars)s characters."),
    ConversationNotFound.code: gettext_lazy("This conversation does not exist."),
    MessageNotFound.code: gettext_lazy("That message is not in this conversation."),
    CollectionNotFound.code: gettext_lazy(
        "The document collection “%(collection)s” does not exist."
    ),
}


def refusal_text(error: DomainError) -> str:
    """``error`` as the chat page shows it, in the active language."""
    words = _BY_CODE.get(error.code)
    if words is None:
        # gettext("") is the catalogue's header.
        return gettext(error.message) if error.message else ""
    values = {
        key: number_format(value) if type(value) is int else value
        for key, value in error.details.items()
    }
    try:
        return str(words) % values
    except (KeyError, TypeError, ValueError):
        return error.message
