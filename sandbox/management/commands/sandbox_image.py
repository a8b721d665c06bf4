from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sandbox.exceptions import EngineUnavailable, ImageError
from sandbox.image import METHODS, image_build, image_status, sandbox_image_ref

EXIT_FAILED = 1  # build failed, or (status) the image is missing
EXIT_UNAVAILABLE = 2  # no Docker engine, or invalid SANDBOX_* settings


class Command(BaseCommand):
    # Provisioning, run before the server and the tests: it reads only the SANDBOX_* settings,
    # so the project's system checks need not pass first.
    requires_system_checks: list[str] = []
    help = (
        "Build or inspect the sandbox image. `build` makes it when missing (from the Dockerfile "
        "when a registry is reachable, else offline with debootstrap); `status` reports it and "
        "exits 1 when it is missing, so `sandbox_image status || sandbox_image build` works; "
        "`ref` prints the image reference. Exit 2: no Docker engine or invalid settings."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{build,status,ref}")
        build = actions.add_parser("build", help="Build the image unless it already exists.")
        build.add_argument(
            "--method",
            choices=METHODS,
            default="auto",
            help="dockerfile needs a registry (or the base image); debootstrap needs root and a "
            "Debian mirror; auto picks dockerfile when the registry answers (default).",
        )
        build.add_argument(
            "--force", action="store_true", help="Rebuild even when the image exists."
        )
        status = actions.add_parser("status", help="Report the image; exit 1 when missing.")
        status.add_argument("--json", action="store_true", help="Print the report as JSON.")
        actions.add_parser("ref", help="Print the image reference the sandbox uses.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "build":
                self.build(options)
            elif options["action"] == "status":
                self.status(options)
            else:
                self.stdout.write(sandbox_image_ref())
        except EngineUnavailable as exc:
            raise CommandError(str(exc), returncode=EXIT_UNAVAILABLE) from exc

    def build(self, options: dict[str, Any]) -> None:
        try:
            result = image_build(
                method=options["method"],
                force=options["force"],
                verbose=options["verbosity"] >= 2,
                progress=self.stdout.write,
            )
        except EngineUnavailable:
            raise
        except ImageError as exc:
            raise CommandError(str(exc), returncode=EXIT_FAILED) from exc
        if result.built:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Built {result.ref} ({result.method}) in {result.duration_s:.0f}s"
                )
            )
        else:
            method = f", built with {result.method}" if result.method else ""
            self.stdout.write(f"{result.ref} is already there{method}; --force rebuilds it")

    def status(self, options: dict[str, Any]) -> None:
        try:
            report = image_status()
        except EngineUnavailable:
            raise
        except ImageError as exc:
            raise CommandError(str(exc), returncode=EXIT_UNAVAILABLE) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.print_report(report)
        if not report["exists"]:
            raise CommandError(
                f"{report['ref']} is missing; build it with `python manage.py sandbox_image build`",
                returncode=EXIT_FAILED,
            )

    def print_report(self, report: dict[str, Any]) -> None:
        rows = [("image", report["ref"])]
        if report["exists"]:
            size = report["size"]
            rows += [
                ("status", self.style.SUCCESS("present")),
                ("id", report["id"]),
                ("size", f"{size / 1e6:.1f} MB" if isinstance(size, int) else "?"),
                ("created", report["created"]),
                ("built with", report["build_method"] or "?"),
                ("suite", report["suite"] or "?"),
                ("packages", " ".join(report["packages"]) or "?"),
                ("python", report["python_version"] or self.style.WARNING("did not run")),
            ]
        else:
            rows.append(("status", self.style.WARNING("missing")))
        rows.append(("engine", f"Docker {report['engine_version']}"))
        for label, value in rows:
            self.stdout.write(f"{label:<11}{value}")
        others = [image for image in report["images"] if not image["current"]]
        if others:
            self.stdout.write("other sandbox images (not used by this configuration):")
            for image in others:
                tags = ", ".join(image["tags"]) or "<untagged>"
                self.stdout.write(f"  {tags}  {image['id'][:19]}  {image['created']}")
