"""Per-message actions and conversations in the system Chromium, against DevAssist under daphne
and the scripted model: regenerate (versions kept and switchable), edit and resend (a fork),
feedback, copy, a stopped turn after a reload, the rename dialog and an undoable delete."""

from __future__ import annotations

from typing import Any

import pytest

from agent.models import AgentRun
from chat.models import Conversation, Message
from tests.chat.test_browser_chat import ANSWER, send
from traces.models import Step

pytestmark = pytest.mark.django_db(transaction=True)


def answers(page: Any) -> list[str]:
    return [text.strip() for text in page.locator(ANSWER).all_inner_texts()]


def bubbles(page: Any) -> list[str]:
    return page.locator(".turn.user .bubble").all_inner_texts()


def settled(page: Any, answered: int = 1) -> None:
    """Wait until ``answered`` answers show and no turn is live (its ``done`` arrived)."""
    page.wait_for_function(
        "n => document.querySelectorAll('.turn.assistant:not(.live)').length === n"
        " && !document.querySelector('.turn.live')",
        arg=answered,
        timeout=20_000,
    )


def test_regenerate_keeps_each_answer_as_a_version_to_switch_between(
    page, login, live_model, screenshot
):
    live_model.script(["The first answer.", "The second answer."])
    login("ada")
    send(page, "say something", route="chat")
    page.locator(ANSWER).wait_for()
    settled(page)

    page.locator(".turn.assistant .action-regenerate").click()
    page.locator(ANSWER).get_by_text("The second answer.").wait_for()
    settled(page)
    assert answers(page) == ["The second answer."]
    versions = page.locator(".turn.assistant .versions")
    assert versions.locator(".version-count").inner_text() == "2 / 2"
    screenshot("regenerated")

    versions.get_by_role("button", name="Previous version").click()
    page.locator(ANSWER).get_by_text("The first answer.").wait_for()
    assert page.locator(".turn.assistant .version-count").inner_text() == "1 / 2"
    assert bubbles(page) == ["say something"]
    # The choice is the conversation's: a reload shows the same version.
    page.reload()
    assert answers(page) == ["The first answer."]
    # The second run was asked the same message, with nothing of the first answer.
    asked = live_model.requests[-1]["messages"]
    assert asked[-1] == {"role": "user", "content": "say something"}
    assert "The first answer." not in str(asked)


def test_edit_and_resend_forks_the_conversation_and_the_model_sees_the_new_branch(
    page, login, live_model, screenshot
):
    live_model.script(["Answer one.", "Answer two.", "Answer one, again."])
    login("ada")
    for answered, text in enumerate(("first question", "second question"), start=1):
        send(page, text, route="chat")
        settled(page, answered)
    assert answers(page) == ["Answer one.", "Answer two."]

    first = page.locator(".turn.user").first
    first.hover()
    first.locator(".action-edit").click()
    editor = first.locator(".edit-form textarea")
    editor.fill("first question, rephrased")
    screenshot("editing")
    editor.press("Enter")
    page.locator(ANSWER).get_by_text("Answer one, again.").wait_for()
    settled(page)

    assert bubbles(page) == ["first question, rephrased"]
    assert answers(page) == ["Answer one, again."]
    assert page.locator(".turn.user .version-count").inner_text() == "2 / 2"
    # The model was given the new branch only: nothing of what followed the old message.
    asked = str(live_model.requests[-1]["messages"])
    assert "second question" not in asked
    assert "Answer two." not in asked
    screenshot("forked")

    page.locator(".turn.user .versions").get_by_role("button", name="Previous version").click()
    page.locator(ANSWER).get_by_text("Answer two.").wait_for()
    assert bubbles(page) == ["first question", "second question"]
    assert answers(page) == ["Answer one.", "Answer two."]


def test_feedback_is_a_step_of_the_runs_trace_and_stays_after_a_reload(page, login, live_model):
    live_model.script(["An answer to rate."])
    login("ada")
    send(page, "rate me", route="chat")
    settled(page)

    page.get_by_role("button", name="Bad answer").click()
    comment = page.get_by_label("Your comment on this answer")
    comment.fill("Too short.")
    page.get_by_role("button", name="Save comment").click()
    page.get_by_text("Your comment").wait_for()

    page.reload()
    assert page.get_by_role("button", name="Bad answer").get_attribute("aria-pressed") == "true"
    assert page.get_by_role("button", name="Good answer").get_attribute("aria-pressed") == "false"
    run = AgentRun.objects.get()
    feedback = list(
        Step.objects.filter(trace__run=run, step_type="feedback")
        .order_by("seq")
        .values_list("data__rating", "data__comment")
    )
    assert feedback == [("down", ""), ("down", "Too short.")]


def test_copy_puts_the_markdown_source_on_the_clipboard(page, login, live_model):
    live_model.script(["Use **bold** and `code`."])
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login("ada")
    send(page, "format something", route="chat")
    settled(page)

    page.locator(".turn.assistant .action-copy").click()

    assert page.evaluate("navigator.clipboard.readText()") == "Use **bold** and `code`."


def test_a_stopped_turn_keeps_its_partial_text_badge_and_state_after_a_reload(
    page, login, live_model, screenshot
):
    live_model.script(
        [{"content": "one two three four five six seven eight", "chunk_delay_s": 0.6}]
    )
    login("ada")
    send(page, "count slowly", route="chat")
    page.wait_for_function(
        "(document.querySelector('.turn.live .streaming')?.textContent || '').includes('two')"
    )
    page.locator("#stop-button").click()
    page.get_by_text("Stopped.").wait_for()
    settled(page)

    page.reload()
    turn = page.locator(".turn.assistant")
    assert turn.locator(".badge.route-chat").inner_text() == "Chat"
    assert turn.locator(".badge.state-stopped").inner_text() == "Stopped"
    text = turn.locator(".markdown").inner_text()
    assert text.startswith("one two")
    assert "eight" not in text
    assert turn.locator(".run-error").inner_text() == "Stopped."
    screenshot("stopped-after-reload")
    answer = Message.objects.get(role="assistant")
    assert answer.content.startswith("one two")
    assert "eight" not in answer.content


def test_rename_in_a_dialog_and_delete_with_undo(page, login, live_model, screenshot):
    live_model.script(["Hello."])
    login("ada")
    send(page, "## Greetings **everyone**", route="chat")
    settled(page)
    row = page.locator(".conversation.current")
    # The title is the message's words, without its Markdown.
    assert row.locator(".conversation-link").inner_text() == "Greetings everyone"

    row.get_by_role("button", name="Rename").click()
    dialog = page.get_by_role("dialog", name="Rename conversation")
    dialog.wait_for()
    title = dialog.get_by_label("Title")
    assert title.evaluate("element => element === document.activeElement")
    title.fill("Team greetings")
    screenshot("rename-dialog")
    title.press("Enter")
    dialog.wait_for(state="detached")
    assert page.locator(".conversation.current .conversation-link").inner_text() == (
        "Team greetings"
    )
    # Escape closes it without a change.
    page.locator(".conversation.current").get_by_role("button", name="Rename").click()
    page.get_by_role("dialog").wait_for()
    page.keyboard.press("Escape")
    page.get_by_role("dialog").wait_for(state="detached")
    assert Conversation.objects.get().title == "Team greetings"

    # Deleting the open conversation leads to a new chat that can undo it.
    page.locator(".conversation.current").get_by_role("button", name="Delete").click()
    toast = page.locator(".toast")
    toast.wait_for()
    assert "Team greetings" in toast.inner_text()
    assert page.locator(".conversation").count() == 0
    screenshot("deleted")
    toast.get_by_role("button", name="Undo").click()
    page.wait_for_url("**/c/*/")
    assert page.locator(".conversation.current .conversation-link").inner_text() == (
        "Team greetings"
    )
    assert answers(page) == ["Hello."]


def test_the_composer_grows_with_the_message_up_to_a_third_of_the_screen(page, login):
    login("ada")
    page.goto("/")
    composer = page.locator("#composer-input")
    empty = composer.bounding_box()["height"]

    composer.fill("\n".join(f"line {n}" for n in range(6)))
    grown = composer.bounding_box()["height"]
    composer.fill("\n".join(f"line {n}" for n in range(200)))
    capped = composer.bounding_box()["height"]

    assert grown > empty * 1.5
    assert capped <= 800 / 3 + 1
    assert composer.evaluate("area => area.scrollHeight > area.clientHeight")
