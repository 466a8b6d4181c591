"""``manage.py audit verify|anchor|show``: check the audit chain, anchor it in Git, read it."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from journal.anchor import AnchorError, anchor_history, anchor_ref
from ledger.audit import AuditBroken, audit_anchor, audit_check
from ledger.models import AuditEntry
from quests.models import Workspace


class Command(BaseCommand):
    help = "Verify a workspace's hash-chained audit log, anchor its head in Git, or show it."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser(
            "verify", help="check every entry's hash and chain, and each anchor in Git"
        )
        verify.add_argument("--workspace", help="one workspace (default: all)")
        anchor = sub.add_parser("anchor", help="anchor the chain's current head in Git now")
        anchor.add_argument("--workspace", help="one workspace (default: all)")
        show = sub.add_parser("show", help="print the last entries of one workspace")
        show.add_argument("--workspace", required=True)
        show.add_argument("--tail", type=int, default=20, help="how many entries (default 20)")

    def handle(self, *args, **options):
        if options["action"] == "show":
            return self._show(self._workspaces(options["workspace"])[0], options["tail"])
        workspaces = self._workspaces(options["workspace"])
        if options["action"] == "verify":
            return self._verify(workspaces)
        return self._anchor(workspaces)

    def _workspaces(self, slug: str | None) -> list[Workspace]:
        if slug is None:
            return list(Workspace.objects.order_by("slug"))
        workspace = Workspace.objects.filter(slug=slug).first()
        if workspace is None:
            raise CommandError(f"no workspace {slug!r}")
        return [workspace]

    def _verify(self, workspaces: list[Workspace]) -> None:
        broken = 0
        for workspace in workspaces:
            check = audit_check(workspace)
            broken += not check.ok
            self.stdout.write(check.summary())
        if broken:
            raise CommandError(
                f"{broken} of {len(workspaces)} audit logs do not verify (docs/audit.md says "
                "what each message means)",
                returncode=1,
            )

    def _anchor(self, workspaces: list[Workspace]) -> None:
        failed = 0
        for workspace in workspaces:
            try:
                anchor = audit_anchor(workspace)
            except AuditBroken as exc:
                why = exc.problem
            except AnchorError as exc:
                why = str(exc)
            else:
                why = None
            if why is not None:
                failed += 1
                self.stdout.write(f"{workspace.slug}: not anchored: {why}")
                continue
            if anchor is None:
                self.stdout.write(f"{workspace.slug}: nothing new to anchor")
            else:
                self.stdout.write(
                    f"{workspace.slug}: anchored entry #{anchor.sequence} on "
                    f"{anchor_ref(workspace.slug)} ({anchor.commit[:12]})"
                )
        if failed:
            raise CommandError(
                f"{failed} of {len(workspaces)} audit logs not anchored", returncode=1
            )

    def _show(self, workspace: Workspace, tail: int) -> None:
        if tail < 1:
            raise CommandError(f"--tail must be at least 1, got {tail}")
        try:
            anchored = {a.sequence for a in anchor_history(workspace.repository, workspace.slug)}
        except AnchorError as exc:
            self.stderr.write(f"the anchors cannot be read: {exc}")
            anchored = set()
        entries = list(AuditEntry.objects.filter(workspace=workspace).order_by("-sequence")[:tail])
        for entry in reversed(entries):
            mark = "  [anchored]" if entry.sequence in anchored else ""
            self.stdout.write(
                f"#{entry.sequence}  {entry.at.isoformat()}  {_one_line(entry.actor)}  "
                f"{entry.action}  {_one_line(entry.object)}  {entry.entry_hash}{mark}\n"
                f"    {json.dumps(entry.payload, sort_keys=True, ensure_ascii=False)}"
            )
        if not entries:
            self.stdout.write(f"{workspace.slug}: no audit entries")


def _one_line(text: str) -> str:
    return " ".join(text.split())  # a stored actor cannot forge lines in the listing
