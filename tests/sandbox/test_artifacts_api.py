"""Files from ``POST /api/sandbox/execute``: stored with the call's trace, listed in the response
with URLs, served to the caller and staff only (404 for anyone else, as for traces), with
headers that never let a file run script in the page."""

from __future__ import annotations

import json
from http import HTTPStatus

import pytest
from django.test import Client

from traces.models import Step

pytestmark = pytest.mark.django_db

PLOT = (
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 2, 3], [2, 4, 1])\n"
    "plt.title('sales')\n"
    "plt.show()\n"
)


def execute(client: Client, code: str) -> dict:
    response = client.post(
        "/api/sandbox/execute",
        data=json.dumps({"code": code, "timeout_s": 30}),
        content_type="application/json",
    )
    assert response.status_code == HTTPStatus.OK, response.content
    body: dict = response.json()
    return body


def test_a_plot_comes_back_as_a_png_artifact_the_caller_can_fetch(api, sandbox_image):
    body = execute(api, PLOT)

    [artifact] = body["artifacts"]
    assert artifact["name"] == "figure-1.png"
    assert artifact["media_type"] == "image/png"
    assert (artifact["width"], artifact["height"]) == (640, 480)
    assert len(artifact["sha256"]) == 64
    assert artifact["url"] == f"/api/traces/{body['trace_id']}/artifacts/{artifact['id']}"
    fetched = api.get(artifact["url"])
    assert fetched.status_code == HTTPStatus.OK
    assert fetched.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(fetched.content) == artifact["size"]
    assert fetched["Content-Type"] == "image/png"
    assert fetched["Content-Disposition"].startswith('inline; filename="figure-1.png"')
    assert fetched["X-Content-Type-Options"] == "nosniff"
    assert fetched["Content-Security-Policy"] == "default-src 'none'; sandbox"
    downloaded = api.get(artifact["url"] + "?download=true")
    assert downloaded["Content-Disposition"].startswith("attachment;")


def test_the_result_step_records_the_artifacts(api, sandbox_image):
    body = execute(api, PLOT)

    result = Step.objects.get(trace_id=body["trace_id"], step_type="result")
    [record] = result.data["artifacts"]
    assert record == {k: v for k, v in body["artifacts"][0].items() if k != "url"}
    assert "files" not in result.data  # never the bytes


def test_someone_else_gets_404_and_staff_can_read(api, other_api, staff_api, sandbox_image):
    body = execute(api, PLOT)
    url = body["artifacts"][0]["url"]

    foreign = other_api.get(url)
    assert foreign.status_code == HTTPStatus.NOT_FOUND
    assert foreign.json()["error"]["code"] == "trace_not_found"
    assert staff_api.get(url).status_code == HTTPStatus.OK
    assert Client().get(url).status_code == HTTPStatus.UNAUTHORIZED
    missing = api.get(url.rsplit("/", 1)[0] + "/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == HTTPStatus.NOT_FOUND
    assert missing.json()["error"]["code"] == "artifact_not_found"


def test_a_csv_is_a_download_as_text(api, sandbox_image):
    body = execute(
        api,
        "import pandas\n"
        "pandas.DataFrame({'month': ['jan', 'feb'], 'sales': [3, 5]})"
        ".to_csv('/tmp/outputs/sales.csv', index=False)\n",
    )

    [artifact] = body["artifacts"]
    assert (artifact["name"], artifact["media_type"]) == ("sales.csv", "text/csv")
    assert "width" not in artifact or artifact["width"] is None
    fetched = api.get(artifact["url"])
    assert fetched.content == b"month,sales\njan,3\nfeb,5\n"
    assert fetched["Content-Type"] == "text/csv; charset=utf-8"
    assert fetched["Content-Disposition"].startswith('attachment; filename="sales.csv"')


def test_plain_text_is_inline_as_text_plain(api, sandbox_image):
    body = execute(api, "open('/tmp/outputs/notes.txt', 'w').write('<b>not markup</b> é')\n")

    fetched = api.get(body["artifacts"][0]["url"])
    assert fetched["Content-Type"] == "text/plain; charset=utf-8"
    assert fetched["Content-Disposition"].startswith("inline;")


@pytest.mark.parametrize(
    ("name", "content", "media_type", "shown_as"),
    [
        ("chart.png", "<html><script>alert(1)</script></html>", "text/html", "fake.png"),
        ("<script>.png", "<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml", "svg"),
        ("page.html", "<!doctype html><p>hi</p>", "text/html", "html"),
    ],
)
def test_markup_is_never_served_inline_whatever_its_name(
    api, sandbox_image, name, content, media_type, shown_as
):
    body = execute(api, f"open('/tmp/outputs/' + {name!r}, 'w').write({content!r})\n")

    [artifact] = body["artifacts"]
    assert artifact["media_type"] == media_type, shown_as
    assert "<" not in artifact["name"]
    fetched = api.get(artifact["url"])
    assert fetched["Content-Type"] == "application/octet-stream"
    assert fetched["Content-Disposition"].startswith("attachment;")
    assert fetched["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in fetched["Content-Security-Policy"]


def test_an_svg_figure_is_a_download(api, sandbox_image):
    body = execute(
        api,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
        "plt.savefig('/tmp/outputs/plot.svg')\nplt.close('all')\n",
    )

    [artifact] = body["artifacts"]
    assert artifact["media_type"] == "image/svg+xml"
    assert api.get(artifact["url"])["Content-Disposition"].startswith("attachment;")


def test_skipped_outputs_are_listed_with_their_reason(api, sandbox_image, settings):
    body = execute(
        api,
        "for i in range(30):\n    open(f'/tmp/outputs/f{i:02}.txt', 'w').write(str(i))\n",
    )

    assert len(body["artifacts"]) == settings.SANDBOX["OPTIONS"]["output_files_max"]
    assert body["skipped_files"][0] == {
        "name": "f20.txt",
        "reason": "over the limit of 20 files per execution",
    }
    assert len(body["skipped_files"]) + body["skipped_more"] == 10


def test_output_with_nul_and_odd_names_is_stored(api, sandbox_image):
    body = execute(
        api,
        "import sys\nsys.stdout.write('a\\x00b\\n')\n"
        "open(b'/tmp/outputs/\\xffname.txt', 'wb').write(b'\\x00\\x01')\n",
    )

    [artifact] = body["artifacts"]
    assert artifact["name"] == "_name.txt"
    assert artifact["media_type"] == "application/octet-stream"
    result = Step.objects.get(trace_id=body["trace_id"], step_type="result")
    assert result.data["artifacts"][0]["name"] == "_name.txt"
    assert "\x00" not in result.data["stdout"]
