"""The code interpreter in the system Chromium, against DevAssist under daphne, the scripted
model and the real sandbox: a CSV attached to a message is read by the code, whose plot shows
inline in the chat (in its step card and under the answer) and on the trace page, whose CSV is
previewed and downloadable; and nobody else can fetch them."""

from __future__ import annotations

import json
import re

import pytest

from agent.models import AgentRun
from tests.browser import PASSWORD, browser_user
from tests.chat.test_browser_chat import ANSWER, send

pytestmark = pytest.mark.django_db(transaction=True)

SALES = "month,sales\njan,3\nfeb,5\nmar,4\n"
PLOT = (
    "import pandas as pd\n"
    "import matplotlib.pyplot as plt\n"
    "df = pd.read_csv('/tmp/inputs/sales.csv')\n"
    "df.plot(x='month', y='sales', kind='bar')\n"
    "plt.title('Sales per month')\n"
    "plt.show()\n"
    "df.assign(double=df.sales * 2).to_csv('/tmp/outputs/summary.csv', index=False)\n"
    "print(df.sales.sum())\n"
)


def call(code: str) -> str:
    return f"Thought: plot it\nAction: tool:execute_code\nargs: {json.dumps({'code': code})}"


def test_a_plot_of_an_attached_csv_shows_in_the_chat_and_the_trace(
    page, login, live_model, screenshot, sandbox_image, tmp_path, chromium, app_server
):
    live_model.script([call(PLOT), "Thought: done\nAction: final: The chart is above: 12 sold."])
    csv = tmp_path / "sales.csv"
    csv.write_text(SALES)
    login("ada")

    page.set_input_files("#composer-file-input", str(csv))
    chips = page.locator("#composer-files")
    assert "sales.csv" in chips.inner_text()
    send(page, "plot sales per month")
    page.locator(ANSWER).wait_for(timeout=60_000)
    page.wait_for_function("!document.querySelector('.turn.live')")

    assert chips.is_hidden()  # sent with the message
    user_turn = page.locator(".turn.user").last
    assert user_turn.locator(".attachment-chip").inner_text().startswith("sales.csv")
    under_answer = page.locator(".turn.assistant .answer-images img")
    under_answer.wait_for()
    assert under_answer.evaluate("img => img.complete && img.naturalWidth > 100")
    card = page.locator(".turn.assistant .step").first
    card.locator("summary").click()
    assert card.locator(".step-stdout").inner_text() == "12\n"
    assert card.locator(".artifact-image img").evaluate("img => img.naturalWidth > 100")
    table = card.locator(".artifact-table table")
    assert table.locator("th").all_inner_texts() == ["month", "sales", "double"]
    assert table.locator("tbody tr").first.locator("td").all_inner_texts() == ["jan", "3", "6"]
    screenshot("plot-in-chat")

    link = card.locator(".artifact-table figcaption a")
    assert link.get_attribute("download") == "summary.csv"
    fetched = page.context.request.get(link.get_attribute("href"))
    assert fetched.headers["content-disposition"].startswith('attachment; filename="summary.csv"')
    assert fetched.text() == "month,sales,double\njan,3,6\nfeb,5,10\nmar,4,8\n"

    # The trace page's detail pane lists the result's files.
    run = AgentRun.objects.get()
    page.goto(f"/traces/{run.trace_id}/")
    # The call's action and its result are both named after the tool: the result is last.
    page.locator(".tree a.name", has_text=re.compile("execute_code")).last.click()
    detail_image = page.locator("#detail .step-artifacts img")
    detail_image.wait_for()
    assert detail_image.evaluate("img => img.naturalWidth > 100")
    screenshot("plot-on-trace-page")

    # Someone else gets 404 for the image and the file.
    image_url = page.locator("#detail .step-artifacts img").get_attribute("src")
    other = chromium.new_context(base_url=app_server)
    try:
        stranger = other.new_page()
        browser_user(type(run.user), "eve")
        stranger.goto("/login/")
        stranger.fill("input[name=username]", "eve")
        stranger.fill("input[name=password]", PASSWORD)
        stranger.click("button[type=submit]")
        stranger.wait_for_url(re.compile(r"^(?!.*/login/).*$"))
        assert stranger.request.get(image_url).status == 404
        attachment = page.context.request.get(
            "/chat/conversations/" + str(run.conversation_id)
        ).json()["messages"][0]["attachments"][0]["url"]
        assert stranger.request.get(attachment).status == 404
        assert page.context.request.get(attachment).text() == SALES
    finally:
        other.close()


def test_dropping_files_on_the_chat_adds_them_and_one_can_be_taken_out(page, login):
    login("ada")
    page.goto("/")
    page.evaluate(
        """() => {
        const transfer = new DataTransfer();
        transfer.items.add(new File(["a,b\\n1,2\\n"], "one.csv", {type: "text/csv"}));
        transfer.items.add(new File(["x"], "two.txt", {type: "text/plain"}));
        const target = document.querySelector('.chat-main');
        const init = {dataTransfer: transfer, bubbles: true, cancelable: true};
        target.dispatchEvent(new DragEvent('dragover', init));
        target.dispatchEvent(new DragEvent('drop', init));
    }"""
    )
    chips = page.locator("#composer-files li")
    assert chips.count() == 2
    page.get_by_role("button", name="Remove one.csv").click()
    assert page.locator("#composer-files").inner_text().startswith("two.txt")
    assert page.evaluate("document.querySelector('#composer-file-input').files.length") == 1
