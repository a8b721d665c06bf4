"""English and Simplified Chinese (docs/i18n.md): the catalogues are complete and compiled, the
language comes from the browser's Accept-Language unless the user chose one (stored on the
server, carried by the language cookie, set again at every sign-in), and pages, fragments,
dates and the JavaScript catalogue follow it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from http import HTTPStatus
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.http import HttpResponse, HttpResponseBase
from django.test import Client

from devassist.models import UserPreferences
from tests.conftest import require
from tests.servers import REPO
from tests.traces.factories import add, make_trace, step
from traces.models import Trace

LOCALE = REPO / "locale"
DOMAINS = ("django", "djangojs")
#: What ``make messages`` leaves out (the Makefile's MESSAGES_ARGS).
IGNORED = [".venv*", "var", "node_modules", "static/vendor", "benchmarks", "tests"]
GETTEXT_TOOLS = ("xgettext", "msgmerge", "msgfmt", "msgattrib", "msgunfmt")
CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}
COOKIE = settings.LANGUAGE_COOKIE_NAME


def html_lang(response: HttpResponseBase) -> str:
    assert isinstance(response, HttpResponse)
    match = re.search(r'<html lang="([^"]+)"', response.content.decode())
    assert match is not None
    return match.group(1)


def require_gettext() -> None:
    missing = [tool for tool in GETTEXT_TOOLS if shutil.which(tool) is None]
    require(not missing, f"GNU gettext is not installed (missing {', '.join(missing)})")


def gettext_tool(*args: str | Path) -> str:
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True).stdout


def msgids(po_text: str) -> list[str]:
    """The msgids (with their context, ``ctx|msgid``) of the entries in ``po_text``."""
    found = []
    for block in po_text.split("\n\n"):
        context = re.search(r'^msgctxt "(.*)"$', block, re.MULTILINE)
        msgid = re.search(r'^msgid "(.*)"$', block, re.MULTILINE)
        if msgid and msgid.group(1):
            found.append(f"{context.group(1)}|{msgid.group(1)}" if context else msgid.group(1))
    return found


@pytest.fixture
def fresh_catalogues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of locale/ after ``make messages`` ran on it: every string the code marks now,
    with the translations the committed files hold.

    makemessages writes each file's strings to the locale folder beside it, so it runs in a
    folder of links to the repository's sources with the copy of locale/ as its own."""
    require_gettext()
    tree = tmp_path / "tree"
    tree.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("locale", ".git"):
            (tree / entry.name).symlink_to(entry)
    shutil.copytree(LOCALE, tree / "locale", ignore=shutil.ignore_patterns("*.mo"))
    monkeypatch.chdir(tree)
    monkeypatch.setattr(settings, "LOCALE_PATHS", [tree / "locale"])
    for domain in DOMAINS:
        call_command(
            "makemessages",
            locale=["zh_Hans"],
            domain=domain,
            ignore_patterns=IGNORED,
            add_location="file",
            no_obsolete=True,
            symlinks=True,
            verbosity=0,
        )
    return tree / "locale" / "zh_Hans" / "LC_MESSAGES"


def test_makemessages_leaves_no_string_untranslated_or_fuzzy(fresh_catalogues: Path) -> None:
    for domain in DOMAINS:
        po = fresh_catalogues / f"{domain}.po"
        untranslated = gettext_tool("msgattrib", "--untranslated", "--no-wrap", po)
        fuzzy = gettext_tool("msgattrib", "--only-fuzzy", "--no-wrap", po)
        assert msgids(untranslated) == [], f"untranslated in {domain}.po: run make messages"
        assert msgids(fuzzy) == [], f"fuzzy in {domain}.po: check and unmark them"
        gettext_tool("msgfmt", "--check", "-o", "/dev/null", po)  # placeholders match
        assert len(msgids(po.read_text())) > 40


def test_the_committed_mo_files_are_compiled_from_the_po_files(tmp_path: Path) -> None:
    require_gettext()
    for domain in DOMAINS:
        folder = LOCALE / "zh_Hans" / "LC_MESSAGES"
        compiled = tmp_path / f"{domain}.mo"
        gettext_tool("msgfmt", "--check", "-o", compiled, folder / f"{domain}.po")
        committed = gettext_tool("msgunfmt", folder / f"{domain}.mo")
        assert committed == gettext_tool("msgunfmt", compiled), (
            f"{domain}.mo is stale: run make compilemessages"
        )


@pytest.mark.django_db
def test_the_login_page_follows_accept_language(client: Client) -> None:
    chinese = client.get("/login/", headers=CHINESE)
    english = client.get("/login/", headers=ENGLISH)

    assert html_lang(chinese) == "zh-hans"
    assert "<h1>登录</h1>" in chinese.content.decode()
    assert chinese["Content-Language"] == "zh-hans"
    assert html_lang(english) == "en"
    assert "<h1>Log in</h1>" in english.content.decode()
    # A language the UI lacks gets English.
    assert html_lang(client.get("/login/", headers={"Accept-Language": "fr-FR,fr"})) == "en"


def failed_trace(user: User) -> Trace:
    """A finished trace whose program exited with 1."""
    trace = make_trace(user, task="Divide by zero")
    goal = step("goal", name="task")
    action = step("action", parent=goal, name="execute_code")
    result = step("result", parent=action, name="execute_code", data={"result": {"exit_code": 1}})
    add(trace, goal, action, result)
    Trace.objects.filter(pk=trace.pk).update(status="failed")
    return trace


@pytest.mark.django_db
def test_trace_pages_follow_accept_language(client: Client, user: User) -> None:
    trace = failed_trace(user)
    client.force_login(user)

    listing = client.get("/traces/", headers=CHINESE).content.decode()
    page = client.get(f"/traces/{trace.id}/", headers=CHINESE).content.decode()
    english = client.get(f"/traces/{trace.id}/", headers=ENGLISH).content.decode()

    assert "<h1>追踪记录</h1>" in listing
    assert "<th>任务</th>" in listing
    assert '<span class="status-badge st-failed">失败</span>' in listing
    assert re.search(r"\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d</time>", listing)
    assert "下一个错误" in page
    assert '<span class="outcome-text">失败 · 退出码 1</span>' in page
    assert '<span class="type">动作</span>' in page
    assert '<span class="outcome-text">failed · exit code 1</span>' in english
    assert "Next error" in english


@pytest.mark.django_db
def test_fragments_and_notices_follow_the_language(client: Client, user: User) -> None:
    trace = failed_trace(user)
    client.force_login(user)

    notice = client.get("/traces/?status=exploded", headers=CHINESE).content.decode()
    search = client.get(f"/traces/{trace.id}/search/?q=execute", headers=CHINESE).content.decode()
    timeline = client.get(f"/traces/{trace.id}/timeline/", headers=CHINESE).content.decode()

    assert "已忽略 status：不是 running, completed, failed, cancelled 之一。" in notice
    assert "个步骤匹配“execute”" in search
    assert "压缩空闲间隔" in timeline


@pytest.mark.django_db
def test_the_switch_stores_the_language_and_wins_over_accept_language(
    client: Client, user: User
) -> None:
    client.force_login(user)

    response = client.post(
        "/ui/language", {"language": "zh-hans"}, headers={"HX-Request": "true", **ENGLISH}
    )

    assert response.status_code == HTTPStatus.OK
    assert response["HX-Refresh"] == "true"
    assert response.cookies[COOKIE].value == "zh-hans"
    assert response.cookies[COOKIE]["max-age"] == settings.LANGUAGE_COOKIE_AGE
    assert UserPreferences.objects.get(user=user).language == "zh-hans"
    page = client.get("/traces/", headers=ENGLISH)
    assert html_lang(page) == "zh-hans"
    assert '<option value="zh-hans" lang="zh-hans" selected>中文</option>' in page.content.decode()


@pytest.mark.django_db
def test_the_stored_choice_is_set_again_at_every_sign_in(user: User, other_user: User) -> None:
    UserPreferences.objects.create(user=user, language="zh-hans")
    browser = Client()  # a browser that never saw the switch

    signed_in = browser.post(
        "/login/", {"username": "alice", "password": "pw-alice-123"}, headers=ENGLISH
    )

    assert signed_in.status_code == HTTPStatus.FOUND
    assert signed_in.cookies[COOKIE].value == "zh-hans"
    assert html_lang(browser.get("/traces/", headers=ENGLISH)) == "zh-hans"
    # Signed out, the login page keeps the last user's language.
    browser.post("/logout/")
    assert html_lang(browser.get("/login/", headers=ENGLISH)) == "zh-hans"
    # Someone who left it to the browser signs in here: their browser's language again.
    signed_in = browser.post(
        "/login/", {"username": "bob", "password": "pw-bob-123"}, headers=ENGLISH
    )
    assert signed_in.cookies[COOKIE].value == ""
    assert html_lang(browser.get("/traces/", headers=ENGLISH)) == "en"
    assert html_lang(browser.get("/traces/", headers=CHINESE)) == "zh-hans"


@pytest.mark.django_db
def test_browser_default_hands_the_choice_back_to_accept_language(
    client: Client, user: User
) -> None:
    client.force_login(user)
    client.post("/ui/language", {"language": "en"})
    assert html_lang(client.get("/traces/", headers=CHINESE)) == "en"

    response = client.post("/ui/language", {"language": "", "next": "/traces/"})

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == "/traces/"
    assert response.cookies[COOKIE].value == ""  # deleted
    assert UserPreferences.objects.get(user=user).language == ""
    assert html_lang(client.get("/traces/", headers=CHINESE)) == "zh-hans"
    assert html_lang(client.get("/traces/", headers=ENGLISH)) == "en"


@pytest.mark.django_db
def test_the_switch_refuses_other_languages_and_foreign_next_urls(
    client: Client, user: User
) -> None:
    client.force_login(user)

    refused = client.post("/ui/language", {"language": "fr"})
    away = client.post("/ui/language", {"language": "en", "next": "https://evil.example/"})

    assert refused.status_code == HTTPStatus.BAD_REQUEST
    assert away["Location"] == "/"
    assert UserPreferences.objects.get(user=user).language == "en"
    assert client.get("/ui/language").status_code == HTTPStatus.METHOD_NOT_ALLOWED


@pytest.mark.django_db
def test_the_javascript_catalogue_is_loaded_first_and_cached_by_version(
    client: Client,
) -> None:
    login = client.get("/login/", headers=CHINESE).content.decode()
    src = re.search(r'<script src="(/jsi18n/\?[^"]+)" defer>', login)
    assert src is not None
    assert login.index(src.group(0)) < login.index("js/theme.js")
    url = src.group(1).replace("&amp;", "&")
    assert "l=zh-hans" in url

    catalogue = client.get(url, headers=CHINESE)  # anonymous: the login page needs it too

    assert catalogue.status_code == HTTPStatus.OK
    assert catalogue["Content-Type"].startswith("text/javascript")
    assert "max-age=86400" in catalogue["Cache-Control"]
    body = catalogue.content.decode()
    assert json.dumps("连接已断开，正在重连…")[1:-1] in body or "连接已断开" in body
    assert '"DECIMAL_SEPARATOR": "."' in body
    english = client.get("/jsi18n/?l=en", headers=ENGLISH).content.decode()
    assert "连接已断开" not in english
