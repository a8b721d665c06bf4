"""The environment helpers' JSON objects (``ARTIFACT_STORAGE_OPTIONS``)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from devassist.env import env_json


def test_a_json_object_is_read_and_unset_is_empty(monkeypatch):
    monkeypatch.setenv(
        "DEVASSIST_TEST_JSON", '{"bucket_name": "artifacts", "querystring_expire": 60}'
    )

    assert env_json("DEVASSIST_TEST_JSON") == {"bucket_name": "artifacts", "querystring_expire": 60}
    assert env_json("DEVASSIST_TEST_UNSET_JSON") == {}


@pytest.mark.parametrize("raw", ["[1, 2]", "{bad json", '"text"'])
def test_anything_but_a_json_object_is_a_configuration_error(monkeypatch, raw):
    monkeypatch.setenv("DEVASSIST_TEST_JSON", raw)

    with pytest.raises(ImproperlyConfigured, match="DEVASSIST_TEST_JSON must be a JSON object"):
        env_json("DEVASSIST_TEST_JSON")
