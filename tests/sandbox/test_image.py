"""The sandbox image: mirror discovery, tag scheme, and a real build with the real engine."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from sandbox.engine import docker_client
from sandbox.exceptions import ImageError
from sandbox.health import docker_status
from sandbox.image import (
    BASE_PACKAGES,
    DOCKERFILE,
    LABEL_METHOD,
    LABEL_PACKAGES,
    LABEL_RECIPE,
    LABEL_SANDBOX,
    LABEL_SUITE,
    debian_mirror,
    dockerfile_config_changes,
    dockerfile_run_steps,
    image_recipe,
    parse_apt_sources,
    parse_deb822_sources,
    parse_one_line_sources,
    recipe_tag,
    sandbox_image_ref,
)
from sandbox.kernel_program import FONT_CACHE
from tests.conftest import require

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://updates.example/debian
Suites: bookworm-updates
Components: main

Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def write_apt_dir(
    root: Path, *, sources_list: str = "", parts: dict[str, str] | None = None
) -> Path:
    apt_dir = root / "apt"
    (apt_dir / "sources.list.d").mkdir(parents=True)
    if sources_list:
        (apt_dir / "sources.list").write_text(sources_list)
    for name, text in (parts or {}).items():
        (apt_dir / "sources.list.d" / name).write_text(text)
    return apt_dir


def engine_reachable() -> bool:
    return bool(docker_status()["ok"])


def unique_repository() -> str:
    return f"devassist-sandbox-test-{uuid.uuid4().hex[:8]}"


# Mirror discovery


def test_deb822_mirror_is_the_main_suite_entry_not_security_or_updates(tmp_path: Path) -> None:
    apt_dir = write_apt_dir(tmp_path, parts={"debian.sources": DEB822})

    assert debian_mirror(suite="bookworm", apt_dir=apt_dir) == "http://mirror.example/debian"


def test_deb822_parsing_skips_disabled_and_source_entries(tmp_path: Path) -> None:
    text = """\
Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Enabled: no

Types: deb deb-src
URIs: http://one.example/debian
  http://two.example/debian
Suites: bookworm
Components: main contrib
"""

    sources = parse_deb822_sources(text, origin="x.sources")

    assert [s.uri for s in sources] == ["http://one.example/debian", "http://two.example/debian"]
    assert sources[0].suites == ("bookworm",)
    assert sources[0].components == ("main", "contrib")
    assert sources[0].origin == "x.sources"


def test_one_line_sources_with_options_comments_and_security_entries(tmp_path: Path) -> None:
    sources_list = """\
# the security archive first, to show it is not taken for the main suite
deb http://security.example/debian-security bookworm-security main
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/etc/k.gpg] http://mirror.example/debian bookworm main # comment
deb http://updates.example/debian bookworm-updates main
"""
    apt_dir = write_apt_dir(tmp_path, sources_list=sources_list)

    sources = parse_one_line_sources(sources_list)

    assert [s.suites for s in sources] == [
        ("bookworm-security",),
        ("bookworm",),
        ("bookworm-updates",),
    ]
    assert sources[1].components == ("main",)
    assert debian_mirror(suite="bookworm", apt_dir=apt_dir) == "http://mirror.example/debian"


def test_sources_are_read_in_apt_order_and_other_files_ignored(tmp_path: Path) -> None:
    apt_dir = write_apt_dir(
        tmp_path,
        sources_list="deb http://first.example/debian bookworm main\n",
        parts={
            "b.list": "deb http://third.example/debian bookworm main\n",
            "a.sources": "Types: deb\nURIs: http://second.example/debian\nSuites: bookworm\n",
            "c.list.disabled": "deb http://ignored.example/debian bookworm main\n",
        },
    )

    assert [s.uri for s in parse_apt_sources(apt_dir)] == [
        "http://first.example/debian",
        "http://second.example/debian",
        "http://third.example/debian",
    ]


def test_a_debian_archive_for_another_suite_serves_as_mirror(tmp_path: Path) -> None:
    apt_dir = write_apt_dir(
        tmp_path,
        sources_list="deb http://security.example/debian-security trixie-security main\n"
        "deb http://mirror.example/debian/ trixie main\n",
    )

    assert debian_mirror(suite="bookworm", apt_dir=apt_dir) == "http://mirror.example/debian/"


def test_mirror_plus_file_uris_resolve_to_their_first_mirror(tmp_path: Path) -> None:
    mirrors = tmp_path / "debian.list"
    mirrors.write_text("# cloud mirrors\nhttp://cloud.example/debian priority:1\n")
    apt_dir = write_apt_dir(
        tmp_path,
        parts={"debian.sources": f"Types: deb\nURIs: mirror+file://{mirrors}\nSuites: bookworm\n"},
    )

    assert debian_mirror(suite="bookworm", apt_dir=apt_dir) == "http://cloud.example/debian"


def test_mirror_setting_overrides_apt_sources(tmp_path: Path, settings: Any) -> None:
    settings.SANDBOX_DEBIAN_MIRROR = "http://override.example/debian"
    apt_dir = write_apt_dir(tmp_path, parts={"debian.sources": DEB822})

    assert debian_mirror(suite="bookworm", apt_dir=apt_dir) == "http://override.example/debian"


def test_no_mirror_is_an_error_naming_the_setting(tmp_path: Path) -> None:
    apt_dir = write_apt_dir(
        tmp_path, sources_list="deb http://archive.ubuntu.example/ubuntu noble main\n"
    )

    with pytest.raises(ImageError, match="SANDBOX_DEBIAN_MIRROR"):
        debian_mirror(suite="bookworm", apt_dir=apt_dir)


# Tag scheme


def test_tag_is_twelve_hex_digits_and_ignores_package_order_and_repeats() -> None:
    text = DOCKERFILE.read_text()

    tag = recipe_tag(dockerfile_text=text, suite="bookworm", extra_packages=["git", "curl"])

    assert re.fullmatch(r"[0-9a-f]{12}", tag)
    assert tag == recipe_tag(
        dockerfile_text=text, suite="bookworm", extra_packages=["curl", "git", "curl"]
    )


def test_tag_changes_with_packages_suite_and_dockerfile() -> None:
    text = DOCKERFILE.read_text()
    base = recipe_tag(dockerfile_text=text, suite="bookworm", extra_packages=[])

    others = {
        recipe_tag(dockerfile_text=text, suite="bookworm", extra_packages=["curl"]),
        recipe_tag(dockerfile_text=text, suite="trixie", extra_packages=[]),
        recipe_tag(dockerfile_text=text + "\n# edited\n", suite="bookworm", extra_packages=[]),
    }

    assert base not in others
    assert len(others) == 3


def test_image_ref_follows_the_settings(settings: Any) -> None:
    settings.SANDBOX_EXTRA_PACKAGES = []
    plain = sandbox_image_ref()
    settings.SANDBOX_EXTRA_PACKAGES = ["curl"]
    with_curl = sandbox_image_ref()
    settings.SANDBOX_IMAGE_REPOSITORY = "registry.example/sandbox"

    assert re.fullmatch(r"devassist-sandbox:[0-9a-f]{12}", plain)
    assert with_curl != plain
    assert sandbox_image_ref() == "registry.example/sandbox:" + with_curl.split(":")[1]
    assert image_recipe().packages == (*BASE_PACKAGES, "curl")


def test_the_data_stack_is_in_every_recipe(settings: Any) -> None:
    settings.SANDBOX_EXTRA_PACKAGES = ["python3-numpy", "python3-scipy"]

    packages = image_recipe().packages

    assert packages[:5] == (
        "python3",
        "python3-numpy",
        "python3-pandas",
        "python3-matplotlib",
        "python3-munkres",
    )
    assert packages.count("python3-numpy") == 1
    assert packages[-1] == "python3-scipy"


@pytest.mark.parametrize("name", ["bad;rm -rf /", "Upper", "-x", "a b"])
def test_invalid_package_names_are_refused(settings: Any, name: str) -> None:
    settings.SANDBOX_EXTRA_PACKAGES = [name]

    with pytest.raises(ImageError, match="SANDBOX_EXTRA_PACKAGES"):
        sandbox_image_ref()


def test_offline_image_gets_the_dockerfile_config() -> None:
    changes = dockerfile_config_changes(DOCKERFILE.read_text())

    assert "USER 65534:65534" in changes
    assert "WORKDIR /tmp" in changes
    assert 'CMD ["python3"]' in changes
    assert any(change.startswith("ENV PATH=") for change in changes)
    assert not [c for c in changes if c.split()[0] in {"RUN", "ARG", "FROM"}]


def test_offline_build_runs_the_dockerfiles_own_run_lines() -> None:
    """Both build methods install the packages and build the font cache with the same
    commands: the offline build runs the Dockerfile's RUN lines in its root."""
    steps = dockerfile_run_steps(DOCKERFILE.read_text())

    assert len(steps) == 2
    install, fonts = steps
    assert "apt-get install -y --no-install-recommends $PACKAGES" in install
    assert "find /usr/lib/python3/dist-packages -depth -type d -name tests" in install
    assert "\n" not in install
    assert fonts.startswith(f"MPLCONFIGDIR={FONT_CACHE} ")


def test_run_lines_are_read_after_the_last_from_with_continuations_joined() -> None:
    text = (
        "FROM a\nRUN echo before\nFROM b\n# RUN in a comment\nRUN one \\\n"
        "    # a comment inside\n    two\nENV X=1\nRUN three\n"
    )

    assert dockerfile_run_steps(text) == ["one two", "three"]


# Commands


def test_no_engine_exits_2(settings: Any) -> None:
    settings.DOCKER_HOST = "tcp://127.0.0.1:1"

    with pytest.raises(CommandError, match="no Docker engine") as exc_info:
        call_command("sandbox_image", "status", stdout=io.StringIO())

    assert exc_info.value.returncode == 2


def test_status_exits_1_when_the_image_is_missing(settings: Any) -> None:
    require(engine_reachable(), "no Docker engine")
    settings.SANDBOX_IMAGE_REPOSITORY = unique_repository()
    out = io.StringIO()

    with pytest.raises(CommandError, match="is missing") as exc_info:
        call_command("sandbox_image", "status", stdout=out)

    assert exc_info.value.returncode == 1
    assert "missing" in out.getvalue()
    assert settings.SANDBOX_IMAGE_REPOSITORY in out.getvalue()


def test_offline_build_needs_root(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    require(engine_reachable(), "no Docker engine")
    settings.SANDBOX_IMAGE_REPOSITORY = unique_repository()
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: "/usr/sbin/debootstrap")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    with pytest.raises(CommandError, match="needs root") as exc_info:
        call_command("sandbox_image", "build", "--method", "debootstrap", stdout=io.StringIO())

    assert exc_info.value.returncode == 1


def test_offline_build_needs_debootstrap(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    require(engine_reachable(), "no Docker engine")
    settings.SANDBOX_IMAGE_REPOSITORY = unique_repository()
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)

    with pytest.raises(CommandError, match="apt-get install debootstrap"):
        call_command("sandbox_image", "build", "--method", "debootstrap", stdout=io.StringIO())


# The real image (built once; later runs find it and reuse it)


@pytest.fixture(scope="module")
def built_image() -> str:
    require(engine_reachable(), "no Docker engine")
    call_command("sandbox_image", "build", stdout=io.StringIO())
    return sandbox_image_ref()


def test_build_is_a_no_op_when_the_image_exists(built_image: str) -> None:
    out = io.StringIO()

    call_command("sandbox_image", "build", stdout=out)

    assert f"{built_image} is already there" in out.getvalue()


def test_status_reports_the_built_image(built_image: str) -> None:
    out = io.StringIO()

    call_command("sandbox_image", "status", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert report["ref"] == built_image
    assert report["exists"] is True
    assert report["id"].startswith("sha256:")
    assert report["size"] > 0
    assert report["build_method"] in {"dockerfile", "debootstrap"}
    assert report["python_version"].startswith("3.")
    assert report["engine_version"]
    assert any(image["current"] for image in report["images"])


def test_image_runs_python_from_stdin_as_nobody_in_tmp(built_image: str) -> None:
    client = docker_client()
    try:
        output = client.containers.run(
            built_image,
            [
                "sh",
                "-c",
                "echo 'import os; print(6 * 7, os.getuid(), os.getgid(), os.getcwd())' "
                "| python3 -I -",
            ],
            network_disabled=True,
            remove=True,
        )
    finally:
        client.close()

    assert output.decode().split() == ["42", "65534", "65534", "/tmp"]


def test_image_has_numpy_pandas_matplotlib_on_agg_with_its_font_cache(built_image: str) -> None:
    code = (
        "import json, os, importlib.util as u; import numpy, pandas, matplotlib; "
        "print(json.dumps({'backend': matplotlib.get_backend(), "
        f"'cache': sorted(os.listdir({FONT_CACHE!r})), "
        "'scipy': u.find_spec('scipy') is not None, "
        "'tests': os.path.exists(os.path.dirname(pandas.__file__) + '/tests')}))"
    )
    client = docker_client()
    try:
        output = client.containers.run(
            built_image, ["python3", "-I", "-c", code], network_disabled=True, remove=True
        )
    finally:
        client.close()

    found = json.loads(output)
    assert found["backend"].lower() == "agg"
    assert any(name.startswith("fontlist-") for name in found["cache"]), found
    assert found["scipy"] is False  # python3-munkres keeps it (and a C++ toolchain) out
    assert found["tests"] is False


def test_a_build_that_finds_its_image_points_latest_at_it(built_image: str) -> None:
    """``latest`` left on another recipe's image (a settings change, another checkout on the
    same engine) is moved back by the next build, even one with nothing to build."""
    repository = built_image.rsplit(":", 1)[0]
    client = docker_client()
    # An empty root filesystem: an image that is certainly not the sandbox's.
    empty = io.BytesIO(b"\0" * 1024)
    other = unique_repository()
    try:
        client.api.import_image_from_data(empty.getvalue(), repository=other, tag="x")
        client.api.tag(f"{other}:x", repository, "latest")
        assert client.images.get(f"{repository}:latest").id != client.images.get(built_image).id

        call_command("sandbox_image", "build", stdout=io.StringIO())

        assert client.images.get(f"{repository}:latest").id == client.images.get(built_image).id
    finally:
        client.api.remove_image(f"{other}:x", force=True)
        client.close()


def test_image_is_labelled_and_configured(built_image: str) -> None:
    client = docker_client()
    try:
        image = client.images.get(built_image)
        latest = client.images.get(built_image.rsplit(":", 1)[0] + ":latest")
    finally:
        client.close()

    labels = image.labels
    assert labels[LABEL_SANDBOX] == "1"
    assert labels[LABEL_RECIPE] == built_image.rsplit(":", 1)[1]
    assert labels[LABEL_METHOD] in {"dockerfile", "debootstrap"}
    assert labels[LABEL_SUITE] == image_recipe().suite
    assert labels[LABEL_PACKAGES].split() == list(image_recipe().packages)
    config = image.attrs["Config"]
    assert config["User"] == "65534:65534"
    assert config["WorkingDir"] == "/tmp"
    assert config["Cmd"] == ["python3"]
    assert latest.id == image.id
