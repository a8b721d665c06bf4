"""The sandbox image: its reference, how it is built and what the engine holds.

The image is a minimal Debian with python3, numpy, pandas and matplotlib (its font cache built
in) plus ``SANDBOX_EXTRA_PACKAGES``. Its tag is a hash of the build inputs (the Dockerfile, the
suite, the package list and ``RECIPE_VERSION``), so the same inputs always name the same image
and a change of inputs names a new one. It is built from ``sandbox/image/Dockerfile`` when an
image registry is reachable (or the base image is already there), and otherwise offline:
debootstrap from a Debian mirror, the Dockerfile's RUN lines in its root, then ``docker
import`` with the Dockerfile's ENV/WORKDIR/USER/CMD lines as the image config. Either way the
result is checked by running python3 in it before it counts as built.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog
from django.conf import settings
from docker import DockerClient
from docker.errors import DockerException, ImageNotFound
from docker.models.images import Image

from sandbox.engine import docker_client
from sandbox.exceptions import EngineUnavailable, ImageError

logger = structlog.get_logger(__name__)

# Bump when the build recipe changes in a way the hashed inputs do not show (this module's
# stripping or import steps), so every installation gets a fresh tag.
RECIPE_VERSION = "2"
# The full standard library (json, decimal, statistics, sqlite3, ...), not just python3-minimal,
# and the data stack people ask a code interpreter for.
# python3-munkres answers python3-fonttools' "python3-scipy | python3-munkres" (matplotlib needs
# fonttools): without it apt takes scipy, and with it pythran's C++ compilers and headers.
BASE_PACKAGES = (
    "python3",
    "python3-numpy",
    "python3-pandas",
    "python3-matplotlib",
    "python3-munkres",
)
DOCKERFILE = Path(__file__).resolve().parent / "image" / "Dockerfile"
APT_DIR = Path("/etc/apt")

LABEL_SANDBOX = "org.devassist.sandbox"
LABEL_RECIPE = "org.devassist.recipe"
LABEL_METHOD = "org.devassist.build_method"
LABEL_SUITE = "org.devassist.suite"
LABEL_PACKAGES = "org.devassist.packages"

Method = Literal["auto", "dockerfile", "debootstrap"]
METHODS: tuple[Method, ...] = ("auto", "dockerfile", "debootstrap")
Progress = Callable[[str], None]

REGISTRY_PROBE_TIMEOUT_S = 5.0
BUILD_REQUEST_TIMEOUT_S = 900.0
STATUS_REQUEST_TIMEOUT_S = 30.0

# Debian policy's package name syntax; names end up in a shell command in the Dockerfile.
_PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_SUITE_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_ONE_LINE_ENTRY = re.compile(r"^(deb|deb-src)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)(.*)$")
_CONFIG_INSTRUCTIONS = {"ENV", "WORKDIR", "USER", "CMD", "ENTRYPOINT", "LABEL", "STOPSIGNAL"}
_DEBOOTSTRAP_SCHEMES = ("http://", "https://", "ftp://", "file:")


@dataclass(frozen=True)
class ImageRecipe:
    """The build inputs; ``tag`` is derived from them."""

    suite: str
    extra_packages: tuple[str, ...]
    dockerfile_text: str

    @property
    def packages(self) -> tuple[str, ...]:
        """Everything installed on top of the base system, base packages first."""
        return BASE_PACKAGES + tuple(p for p in self.extra_packages if p not in BASE_PACKAGES)

    @property
    def tag(self) -> str:
        return recipe_tag(
            dockerfile_text=self.dockerfile_text,
            suite=self.suite,
            extra_packages=self.extra_packages,
        )

    @property
    def base_image(self) -> str:
        """The Dockerfile's ``FROM`` image for this suite, e.g. ``debian:bookworm-slim``."""
        for line in self.dockerfile_text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0].upper() == "FROM":
                return words[1].replace("${SUITE}", self.suite).replace("$SUITE", self.suite)
        raise ImageError(f"{DOCKERFILE} has no FROM line")


@dataclass(frozen=True)
class AptSource:
    """One ``deb`` entry of the apt sources (one URI)."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    origin: str


@dataclass(frozen=True)
class BuildResult:
    """``built`` is False when the image was already there (``duration_s`` is then 0)."""

    ref: str
    image_id: str
    method: str
    built: bool
    duration_s: float


def recipe_tag(
    *, dockerfile_text: str, suite: str, extra_packages: tuple[str, ...] | list[str]
) -> str:
    """The image tag for these inputs: 12 hex digits of a SHA-256. Extra packages are a set
    (order and repeats do not matter)."""
    payload = json.dumps(
        {
            "recipe": RECIPE_VERSION,
            "dockerfile": dockerfile_text,
            "suite": suite,
            "base_packages": list(BASE_PACKAGES),
            "extra_packages": sorted(set(extra_packages)),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def image_recipe() -> ImageRecipe:
    """The recipe from the settings and the Dockerfile. Raises ``ImageError`` for a malformed
    suite or package name."""
    suite = settings.SANDBOX_DEBIAN_SUITE.strip()
    if not _SUITE_NAME.match(suite):
        raise ImageError(f"SANDBOX_DEBIAN_SUITE {suite!r} is not a Debian suite name")
    extras = sorted({name.strip() for name in settings.SANDBOX_EXTRA_PACKAGES if name.strip()})
    bad = [name for name in extras if not _PACKAGE_NAME.match(name)]
    if bad:
        raise ImageError(f"SANDBOX_EXTRA_PACKAGES has invalid Debian package names: {bad}")
    return ImageRecipe(
        suite=suite, extra_packages=tuple(extras), dockerfile_text=DOCKERFILE.read_text()
    )


def sandbox_image_ref() -> str:
    """The reference the sandbox runs, ``<SANDBOX_IMAGE_REPOSITORY>:<tag>``, e.g.
    ``devassist-sandbox:3f2a9c1b7e0d``. Does not contact the engine."""
    return f"{settings.SANDBOX_IMAGE_REPOSITORY}:{image_recipe().tag}"


def dockerfile_config_changes(dockerfile_text: str) -> list[str]:
    """The image-config instructions after the last ``FROM`` (ENV, WORKDIR, USER, CMD, …), as
    ``docker import --change`` values, so the offline image gets the Dockerfile's config."""
    changes: list[str] = []
    for raw in dockerfile_text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction = line.split(maxsplit=1)[0].upper()
        if instruction == "FROM":
            changes = []
        elif instruction in _CONFIG_INSTRUCTIONS:
            if line.endswith("\\"):
                raise ImageError(f"{DOCKERFILE}: keep {instruction} on one line: {line!r}")
            changes.append(line)
    return changes


# Apt sources


def parse_deb822_sources(text: str, *, origin: str = "") -> list[AptSource]:
    """The enabled ``deb`` entries of a deb822 ``.sources`` file, one per URI."""
    sources = []
    for stanza in _deb822_stanzas(text):
        if "deb" not in stanza.get("types", "").split():
            continue
        if stanza.get("enabled", "yes").strip().lower() == "no":
            continue
        suites = tuple(stanza.get("suites", "").split())
        components = tuple(stanza.get("components", "").split())
        for uri in stanza.get("uris", "").split():
            sources.append(AptSource(uri=uri, suites=suites, components=components, origin=origin))
    return sources


def _deb822_stanzas(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, None
            continue
        if line[0] in " \t":
            if key is not None:
                fields[key] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip().lower()
            fields[key] = value.strip()
    if fields:
        yield fields


def parse_one_line_sources(text: str, *, origin: str = "") -> list[AptSource]:
    """The ``deb`` lines of a classic ``sources.list`` (``deb [options] uri suite comp...``)."""
    sources = []
    for raw in text.splitlines():
        match = _ONE_LINE_ENTRY.match(raw.split("#", 1)[0].strip())
        if match is None or match.group(1) != "deb":
            continue
        sources.append(
            AptSource(
                uri=match.group(2),
                suites=(match.group(3),),
                components=tuple(match.group(4).split()),
                origin=origin,
            )
        )
    return sources


def parse_apt_sources(apt_dir: Path = APT_DIR) -> list[AptSource]:
    """Every ``deb`` entry under ``apt_dir`` in apt's reading order: ``sources.list``, then
    ``sources.list.d/*.list`` and ``*.sources`` by name. Unreadable files are skipped."""
    files = [apt_dir / "sources.list"]
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in {".list", ".sources"})
    sources: list[AptSource] = []
    for path in files:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if path.suffix == ".sources":
            sources += parse_deb822_sources(text, origin=str(path))
        else:
            sources += parse_one_line_sources(text, origin=str(path))
    return sources


def debian_mirror(*, suite: str, apt_dir: Path = APT_DIR) -> str:
    """The Debian mirror for debootstrap: ``SANDBOX_DEBIAN_MIRROR`` when set, else the apt
    source carrying ``suite`` itself (not ``-security``/``-updates``), else any Debian archive
    entry (a ``…/debian`` URI; every Debian mirror carries every suite). Raises ``ImageError``
    when there is none."""
    if settings.SANDBOX_DEBIAN_MIRROR:
        return str(settings.SANDBOX_DEBIAN_MIRROR)
    sources = [s for s in parse_apt_sources(apt_dir) if _usable_uri(s.uri)]
    for source in sources:
        if suite in source.suites:
            return _resolve_uri(source.uri)
    for source in sources:
        main_suites = [s for s in source.suites if "-" not in s and "/" not in s]
        if main_suites and _resolve_uri(source.uri).rstrip("/").endswith("/debian"):
            return _resolve_uri(source.uri)
    raise ImageError(
        f"no Debian mirror for {suite!r} in {apt_dir}/sources.list or sources.list.d; "
        "set SANDBOX_DEBIAN_MIRROR (e.g. http://deb.debian.org/debian)"
    )


def _usable_uri(uri: str) -> bool:
    return uri.startswith(_DEBOOTSTRAP_SCHEMES) or uri.startswith("mirror+file:")


def _resolve_uri(uri: str) -> str:
    """``mirror+file:`` (Debian cloud images) names a file listing mirrors: take the first."""
    if not uri.startswith("mirror+file:"):
        return uri
    path = uri.removeprefix("mirror+file:").removeprefix("//")
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return uri
    for line in lines:
        words = line.split("#", 1)[0].split()
        if words and words[0].startswith(_DEBOOTSTRAP_SCHEMES):
            return words[0]
    return uri


# Engine access


@contextmanager
def _engine(*, timeout_s: float) -> Iterator[DockerClient]:
    try:
        client = docker_client(timeout_s=timeout_s)
        client.ping()
    except (DockerException, OSError) as exc:
        where = settings.DOCKER_HOST or os.environ.get("DOCKER_HOST") or "the local socket"
        raise EngineUnavailable(
            f"no Docker engine at {where} ({_short(exc)}); start it (`systemctl start docker` or "
            "`dockerd &`) or point DOCKER_HOST at one"
        ) from exc
    try:
        yield client
    finally:
        client.close()


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _image_or_none(client: DockerClient, ref: str) -> Image | None:
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None


def registry_reachable(*, image: str, timeout_s: float = REGISTRY_PROBE_TIMEOUT_S) -> bool:
    """Whether the engine can reach the registry holding ``image``: it asks the registry for
    the image's manifest (no layers are pulled), giving up after ``timeout_s`` seconds."""
    try:
        client = docker_client(timeout_s=timeout_s)
        try:
            client.api.inspect_distribution(image)
        finally:
            client.close()
    except (DockerException, OSError) as exc:
        logger.debug("sandbox_registry_unreachable", image=image, error=_short(exc))
        return False
    return True


def _run_python(client: DockerClient, ref: str, code: str) -> str:
    """What ``python3 -I -c code`` prints in a throwaway container of ``ref`` (no network)."""
    output = client.containers.run(
        ref,
        ["python3", "-I", "-c", code],
        network_disabled=True,
        remove=True,
        stdout=True,
        stderr=True,
    )
    return bytes(output).decode(errors="replace").strip()


def _python_version(client: DockerClient, ref: str) -> str:
    return _run_python(client, ref, "import sys; print('%d.%d.%d' % sys.version_info[:3])")


# Status


def image_status(*, run_python: bool = True) -> dict[str, Any]:
    """What the engine holds for the sandbox image.

    Keys: ``ref``, ``exists``, ``id``, ``size`` (bytes), ``created`` (ISO 8601 from the engine),
    ``build_method``, ``suite``, ``packages``, ``python_version`` (from running python3 in the
    image when ``run_python``; ``""`` otherwise or on failure), ``engine_version``, and
    ``images``: every sandbox image there, ``{"tags", "id", "created", "current"}``. Raises
    ``EngineUnavailable`` when no engine answers, ``ImageError`` for invalid settings.
    """
    ref = sandbox_image_ref()
    with _engine(timeout_s=STATUS_REQUEST_TIMEOUT_S) as client:
        engine_version = str(client.version().get("Version", ""))
        image = _image_or_none(client, ref)
        status: dict[str, Any] = {
            "ref": ref,
            "exists": image is not None,
            "id": "",
            "size": None,
            "created": "",
            "build_method": "",
            "suite": "",
            "packages": [],
            "python_version": "",
            "engine_version": engine_version,
        }
        if image is not None:
            labels = image.labels
            status.update(
                id=image.id,
                size=image.attrs.get("Size"),
                created=image.attrs.get("Created", ""),
                build_method=labels.get(LABEL_METHOD, ""),
                suite=labels.get(LABEL_SUITE, ""),
                packages=labels.get(LABEL_PACKAGES, "").split(),
            )
            if run_python:
                try:
                    status["python_version"] = _python_version(client, ref)
                except (DockerException, OSError) as exc:
                    logger.warning("sandbox_image_python_failed", ref=ref, error=_short(exc))
        status["images"] = [
            {
                "tags": sorted(other.tags),
                "id": other.id,
                "created": other.attrs.get("Created", ""),
                "current": image is not None and other.id == image.id,
            }
            for other in client.images.list(filters={"label": f"{LABEL_SANDBOX}=1"})
        ]
    return status


# Build


def image_build(
    *,
    method: Method = "auto",
    force: bool = False,
    verbose: bool = False,
    progress: Progress = lambda message: None,
) -> BuildResult:
    """Make sure the image for the current inputs exists, building it when it does not (or
    when ``force``), and that ``<repository>:latest`` names it.

    ``method`` ``"auto"`` uses the Dockerfile when the base image is present or its registry
    answers within ``REGISTRY_PROBE_TIMEOUT_S``, else debootstrap. ``progress`` receives
    one-line updates (every build output line when ``verbose``). Builds on one machine run one
    at a time. Raises ``EngineUnavailable`` without an engine and ``ImageError`` when the
    build, or the python3 check of the result, fails; a failed check removes the image.
    """
    if method not in METHODS:
        raise ImageError(f"unknown build method {method!r}; choose from {', '.join(METHODS)}")
    recipe = image_recipe()
    repository = str(settings.SANDBOX_IMAGE_REPOSITORY)
    ref = f"{repository}:{recipe.tag}"
    with _engine(timeout_s=BUILD_REQUEST_TIMEOUT_S) as client, _build_lock(progress):
        existing = _image_or_none(client, ref)
        if existing is not None and not force:
            # ``latest`` may name another recipe's image (built before a settings change, or
            # by another checkout on the same engine): it always names the current one.
            client.api.tag(existing.id, repository, "latest")
            return BuildResult(
                ref=ref,
                image_id=existing.id,
                method=existing.labels.get(LABEL_METHOD, ""),
                built=False,
                duration_s=0.0,
            )
        chosen = method if method != "auto" else _choose_method(client, recipe, progress)
        started = time.monotonic()
        if chosen == "dockerfile":
            _build_from_dockerfile(
                client,
                recipe,
                ref,
                forced=method == "dockerfile",
                nocache=force,
                verbose=verbose,
                progress=progress,
            )
        else:
            _build_with_debootstrap(client, recipe, ref, verbose=verbose, progress=progress)
        image = _verified(client, ref, progress)
        client.api.tag(image.id, repository, "latest")
        if existing is not None and existing.id != image.id:
            _remove_quietly(client, existing.id)
        duration_s = time.monotonic() - started
    logger.info("sandbox_image_built", ref=ref, method=chosen, duration_s=round(duration_s, 1))
    return BuildResult(ref=ref, image_id=image.id, method=chosen, built=True, duration_s=duration_s)


@contextmanager
def _build_lock(progress: Progress) -> Iterator[None]:
    """One build at a time on this machine, so concurrent callers build once and the later
    ones find the image. Without a writable lock file the build goes ahead unlocked."""
    path = Path(tempfile.gettempdir()) / "devassist-sandbox-build.lock"
    try:
        handle = path.open("a")
    except OSError:
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("waiting for another sandbox image build to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _choose_method(client: DockerClient, recipe: ImageRecipe, progress: Progress) -> Method:
    base = recipe.base_image
    if _image_or_none(client, base) is not None:
        progress(f"base image {base} is present: building from the Dockerfile")
        return "dockerfile"
    if registry_reachable(image=base):
        progress(f"registry answers for {base}: building from the Dockerfile")
        return "dockerfile"
    progress(f"no registry reachable for {base}: building offline with debootstrap")
    return "debootstrap"


def _labels(recipe: ImageRecipe, method: str) -> dict[str, str]:
    return {
        LABEL_SANDBOX: "1",
        LABEL_RECIPE: recipe.tag,
        LABEL_METHOD: method,
        LABEL_SUITE: recipe.suite,
        LABEL_PACKAGES: " ".join(recipe.packages),
    }


def _build_from_dockerfile(
    client: DockerClient,
    recipe: ImageRecipe,
    ref: str,
    *,
    forced: bool,
    nocache: bool,
    verbose: bool,
    progress: Progress,
) -> None:
    progress(f"docker build {DOCKERFILE} -> {ref}")
    stream = client.api.build(
        path=str(DOCKERFILE.parent),
        dockerfile=DOCKERFILE.name,
        tag=ref,
        buildargs={
            "SUITE": recipe.suite,
            "PACKAGES": " ".join(recipe.packages),
            "DEBIAN_MIRROR": str(settings.SANDBOX_DEBIAN_MIRROR),
        },
        labels=_labels(recipe, "dockerfile"),
        rm=True,
        forcerm=True,
        nocache=nocache,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            hint = " (no registry reachable? --method debootstrap builds offline)" if forced else ""
            raise ImageError(f"docker build failed: {_short(chunk['error'])}{hint}")
        for line in str(chunk.get("stream", "")).splitlines():
            if line.strip() and (verbose or line.startswith("Step ")):
                progress(line.rstrip())


def _build_with_debootstrap(
    client: DockerClient, recipe: ImageRecipe, ref: str, *, verbose: bool, progress: Progress
) -> None:
    debootstrap = _debootstrap_path()
    mirror = debian_mirror(suite=recipe.suite)
    workdir = Path(tempfile.mkdtemp(prefix="devassist-sandbox-", dir=_scratch_dir()))
    rootfs = workdir / "rootfs"
    try:
        _run_debootstrap(debootstrap, recipe, rootfs, mirror, verbose=verbose, progress=progress)
        _run_dockerfile_steps(rootfs, recipe, progress)
        _strip_rootfs(rootfs)
        archive = workdir / "rootfs.tar"
        _write_tar(rootfs, archive)
        progress(f"docker import ({archive.stat().st_size / 1e6:.0f} MB) -> {ref}")
        changes = dockerfile_config_changes(recipe.dockerfile_text) + [
            f"LABEL {key}={json.dumps(value)}"
            for key, value in _labels(recipe, "debootstrap").items()
        ]
        repository, _, tag = ref.rpartition(":")
        client.api.import_image(src=str(archive), repository=repository, tag=tag, changes=changes)
    finally:
        _remove_workdir(workdir, progress)


def _debootstrap_path() -> str:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    path = shutil.which("debootstrap", path=search)
    if path is None:
        raise ImageError(
            "the offline build needs debootstrap: `apt-get install debootstrap` "
            "(or build where an image registry is reachable: --method dockerfile)"
        )
    if os.geteuid() != 0:
        raise ImageError(
            "the offline build runs debootstrap, which needs root: run "
            "`sudo .venv/bin/python manage.py sandbox_image build` once "
            "(or build where an image registry is reachable: --method dockerfile)"
        )
    return path


def _scratch_dir() -> str | None:
    """``/var/tmp`` (disk-backed; /tmp may be a small or noexec tmpfs) unless TMPDIR says."""
    if os.environ.get("TMPDIR"):
        return None
    scratch = Path("/var/tmp")  # noqa: S108 - the parent for mkdtemp, not a fixed file name
    return str(scratch) if scratch.is_dir() else None


def _run_debootstrap(
    debootstrap: str,
    recipe: ImageRecipe,
    rootfs: Path,
    mirror: str,
    *,
    verbose: bool,
    progress: Progress,
) -> None:
    command = [
        debootstrap,
        "--variant=minbase",
        "--force-check-gpg",
        # The packages go in afterwards, by the Dockerfile's own RUN lines (without their
        # Recommends): debootstrap's resolver would take the Recommends too.
        recipe.suite,
        str(rootfs),
        mirror,
    ]
    progress(" ".join(command))
    env = {
        **os.environ,
        "LC_ALL": "C",
        "DEBIAN_FRONTEND": "noninteractive",
        "PATH": os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]),
    }
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=25)
    phases: set[str] = set()
    with subprocess.Popen(  # noqa: S603 - fixed program, validated arguments, no shell
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
    ) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip()
            if not line:
                continue
            tail.append(line)
            # Summarise: the first line of each phase plus every warning and error. A phase is
            # the verb, with per-package lines ("Retrieving libc6 2.36-9") a phase of their own.
            words = line[3:].split() if line.startswith("I: ") else []
            phase = " ".join(words[:1]) + (" <package>" if len(words) == 3 else "")
            if verbose or not phase or phase not in phases:
                progress(f"  [{time.monotonic() - started:4.0f}s] {line}")
            phases.add(phase)
        returncode = process.wait()
    if returncode != 0:
        last = "\n".join(tail)
        hint = "\n(apt-get install debian-archive-keyring)" if "keyring" in last else ""
        raise ImageError(f"debootstrap from {mirror} failed (exit {returncode}):\n{last}{hint}")


def dockerfile_run_steps(dockerfile_text: str) -> list[str]:
    """The shell commands of the ``RUN`` lines after the last ``FROM`` (continuation lines
    joined), as the offline build runs them in its root."""
    steps: list[str] = []
    current: list[str] | None = None
    for raw in dockerfile_text.splitlines():
        line = raw.strip()
        if current is not None:
            if line.startswith("#"):
                continue
            current.append(line.removesuffix("\\").strip())
            if not line.endswith("\\"):
                steps.append(" ".join(part for part in current if part))
                current = None
            continue
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            steps = []
        elif instruction.upper() == "RUN":
            if rest.lstrip().startswith("["):
                raise ImageError(f"{DOCKERFILE}: write RUN in shell form: {line!r}")
            current = [rest.removesuffix("\\").strip()]
            if not line.endswith("\\"):
                steps.append(current[0])
                current = None
    return steps


def _run_dockerfile_steps(rootfs: Path, recipe: ImageRecipe, progress: Progress) -> None:
    """The Dockerfile's ``RUN`` lines, run by ``/bin/sh -c`` in the debootstrapped root with the
    build arguments as environment variables (as ``docker build`` runs them), so both methods
    install the same packages the same way. ``DEBIAN_MIRROR`` is empty: the root's apt
    sources already name the mirror debootstrap used."""
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LC_ALL": "C",
        "SUITE": recipe.suite,
        "PACKAGES": " ".join(recipe.packages),
        "DEBIAN_MIRROR": "",
    }
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    chroot = shutil.which("chroot", path=search) or "/usr/sbin/chroot"
    for step in dockerfile_run_steps(recipe.dockerfile_text):
        started = time.monotonic()
        progress(f"RUN {step[:100]}{'…' if len(step) > 100 else ''}")
        completed = subprocess.run(  # noqa: S603 - the project's Dockerfile, validated names
            [chroot, str(rootfs), "/bin/sh", "-c", step],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        if completed.returncode != 0:
            output = (completed.stdout + completed.stderr)[-3000:]
            raise ImageError(
                f"RUN {step[:200]!r} in the debootstrapped root failed "
                f"(exit {completed.returncode}):\n{output}"
            )
        progress(f"  [{time.monotonic() - started:4.0f}s] done")


def _strip_rootfs(rootfs: Path) -> None:
    """Drop what a sandbox never reads (package lists and caches, docs, translations, logs)
    and the host's resolver config, which debootstrap copies in and Docker replaces at run
    time anyway."""
    for relative in (
        "var/lib/apt/lists",
        "var/cache/apt",
        "var/log",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
        "tmp",
    ):
        _clear_dir(rootfs, rootfs / relative)
    for leftover in (rootfs / "var/cache/debconf").glob("*-old"):
        leftover.unlink()
    # Message translations (a third of /usr); the top-level locale.alias stays.
    locale = rootfs / "usr/share/locale"
    for catalogue in locale.iterdir() if locale.is_dir() else ():
        if catalogue.is_dir() and not catalogue.is_symlink():
            shutil.rmtree(catalogue)
    for relative in ("etc/resolv.conf", "etc/hostname"):
        path = rootfs / relative
        if path.is_file() and not path.is_symlink():
            path.write_text("")


def _clear_dir(rootfs: Path, directory: Path) -> None:
    """Empty ``directory`` (keeping subdirectories apt expects, emptied) without leaving
    ``rootfs``: symlinks are removed, never followed."""
    if not directory.is_dir() or not directory.resolve().is_relative_to(rootfs.resolve()):
        return
    for entry in directory.iterdir():
        if entry.is_symlink() or not entry.is_dir():
            entry.unlink()
        elif entry.name in {"partial", "archives", "apt"}:
            _clear_dir(rootfs, entry)
        else:
            shutil.rmtree(entry)


def _write_tar(rootfs: Path, archive: Path) -> None:
    """Stream ``rootfs`` into ``archive`` (owners, modes and hard links kept). ``dev``,
    ``proc`` and ``sys`` go in empty: the engine provides them in every container."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if info.name.startswith(("dev/", "proc/", "sys/")) else info

    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(rootfs)):
            tar.add(rootfs / entry, arcname=entry, filter=keep)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            # mountinfo escapes space, tab, newline and backslash as octal (\040).
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == prefix or point.startswith(prefix + "/"):
                mounts.append(point)
    return mounts


def _remove_workdir(workdir: Path, progress: Progress) -> None:
    """Remove the (root-owned) build directory, first detaching anything debootstrap left
    mounted in it: removing a tree with /dev or /proc bound inside would reach the host's."""
    for point in sorted(_mounts_under(workdir), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)  # noqa: S603, S607
    left = _mounts_under(workdir)
    if left:
        logger.error("sandbox_rootfs_left_mounted", workdir=str(workdir), mounts=left)
        progress(f"left {workdir} in place: still mounted: {', '.join(left)}")
        return
    shutil.rmtree(workdir, ignore_errors=True)


def _verified(client: DockerClient, ref: str, progress: Progress) -> Image:
    """The built image, after python3 printed 2 in it (no network, container removed).
    A failing image is removed so that the next build does not take it for done."""
    try:
        image = client.images.get(ref)
    except ImageNotFound as exc:
        raise ImageError(f"the build finished but {ref} is not there") from exc
    try:
        answer = _run_python(client, ref, "print(1+1)")
    except (DockerException, OSError) as exc:
        answer = _short(exc)
    if answer != "2":
        _remove_quietly(client, image.id)
        raise ImageError(f"{ref} is broken: python3 -c 'print(1+1)' gave {answer!r}; removed it")
    progress(f"checked: python3 runs in {ref}")
    return image


def _remove_quietly(client: DockerClient, image_id: str) -> None:
    """Remove an image the sandbox no longer uses; one still used by a container stays."""
    try:
        client.images.remove(image_id)
    except DockerException as exc:
        logger.info("sandbox_image_kept", image_id=image_id, error=_short(exc))
