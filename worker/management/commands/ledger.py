"""``manage.py ledger``: look at the operation ledger and settle what needs a person.

    ledger status [--workspace SLUG]            counts by state, leases, inbound queue, and
                                                effect types that no adapter serves
    ledger list [--state S] [--workspace SLUG]  operations, newest first
    ledger refused [--workspace SLUG]           submitted events the worker refused, and why
    ledger resolve KEY succeeded|failed|absent --by NAME [--note TEXT]

``resolve`` settles an ambiguous or dead operation: it landed (succeeded), it did not and must
not be tried again (failed), or it did not and may be delivered again (absent). The change is
audited. While a worker serves the workspace the verdict is queued for it; otherwise the
command applies it under the workspace's lease itself.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count
from django.utils import timezone

from ephyra.compose import effect_adapters
from ephyra.core.effects import EffectType
from ledger.inbound import submit_resolution
from ledger.lease import LeaseHeld, holding
from ledger.models import InboundEvent, JournalReplica, Lease, Operation
from ledger.selectors import operation_counts, refused_events, waiting_by_type
from quests.models import Workspace
from worker.delivery import resolve_by_person


class Command(BaseCommand):
    help = "Show the operation ledger; resolve ambiguous or dead operations."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        status = sub.add_parser("status", help="counts by state, leases, inbound queue")
        status.add_argument("--workspace")
        listing = sub.add_parser("list", help="operations, newest first")
        listing.add_argument("--workspace")
        listing.add_argument("--state", choices=[s.value for s in Operation.State])
        listing.add_argument("--limit", type=int, default=50)
        refused = sub.add_parser("refused", help="submitted events the worker refused, and why")
        refused.add_argument("--workspace")
        refused.add_argument("--limit", type=int, default=50)
        resolve = sub.add_parser("resolve", help="settle an ambiguous or dead operation")
        resolve.add_argument("key")
        resolve.add_argument("verdict", choices=["succeeded", "failed", "absent"])
        resolve.add_argument("--by", required=True, help="who decides (kept in the audit log)")
        resolve.add_argument("--note", default="")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _workspaces(self, slug: str | None):
        workspaces = Workspace.objects.order_by("slug")
        if slug:
            workspaces = workspaces.filter(slug=slug)
            if not workspaces.exists():
                raise CommandError(f"no workspace {slug!r}")
        return workspaces

    def _status(self, workspace: str | None, **_) -> None:
        workspaces = list(self._workspaces(workspace))
        slugs = [ws.slug for ws in workspaces]
        counts = operation_counts(slugs)
        waiting = waiting_by_type(slugs)
        local = sorted(str(t) for t in effect_adapters())
        leases = {
            lease.pk: lease for lease in Lease.objects.filter(pk__in=[w.pk for w in workspaces])
        }
        inbound = dict(
            InboundEvent.objects.filter(workspace__in=workspaces, state=InboundEvent.State.PENDING)
            .values_list("workspace__slug")
            .annotate(n=Count("pk"))
        )
        replicas = {
            r.pk: r for r in JournalReplica.objects.filter(pk__in=[w.pk for w in workspaces])
        }
        for ws in workspaces:
            lease = leases.get(ws.pk)
            live = lease is not None and lease.owner and lease.expires_at > timezone.now()
            if live:
                holder = (
                    f"{lease.owner} (generation {lease.generation}, "
                    f"heartbeat {lease.heartbeat_at:%H:%M:%S}, until {lease.expires_at:%H:%M:%S})"
                )
            else:
                holder = "nobody"
            states = " ".join(f"{s}={counts[ws.slug].get(s, 0)}" for s in Operation.State.values)
            pending = inbound.get(ws.slug, 0)
            self.stdout.write(f"{ws.slug}: {states} inbound={pending} served by {holder}")
            # What the serving worker said it serves; with no worker, this process's table.
            served = set(lease.effect_types if live else local)
            stuck = {t: n for t, n in waiting[ws.slug].items() if t not in served}
            if stuck:
                listed = ", ".join(f"{t}={n}" for t, n in sorted(stuck.items()))
                self.stdout.write(f"  waiting for an adapter: {listed}")
            if ws.journal_remote:
                self.stdout.write(f"  {replica_line(replicas.get(ws.pk))}")
        unserved = [str(t) for t in EffectType if str(t) not in local]
        if unserved:
            self.stdout.write(f"effect types without an adapter here: {', '.join(unserved)}")

    def _refused(self, workspace: str | None, limit: int, **_) -> None:
        slugs = [ws.slug for ws in self._workspaces(workspace)]
        for row in refused_events(slugs, limit=limit):
            why = row.result.get("reason") or row.result.get("error", "")
            when = (row.applied_at or row.received_at).strftime("%Y-%m-%d %H:%M:%S")
            self.stdout.write(
                f"{when} {row.workspace.slug} {row.quest_id} {row.event_id} {row.type} "
                f"{row.state} (from {row.source}): {' '.join(why.split())}"
            )

    def _list(self, workspace: str | None, state: str | None, limit: int, **_) -> None:
        ops = Operation.objects.filter(workspace__in=self._workspaces(workspace))
        if state:
            ops = ops.filter(state=state)
        for op in ops.order_by("-id")[:limit]:
            why = op.outcome.get("error") or op.outcome.get("status", "")
            self.stdout.write(f"{op.state:9} {op.attempts}x {op.key} {why}".rstrip())

    def _resolve(self, key: str, verdict: str, by: str, note: str, **_) -> None:
        op = Operation.objects.select_related("workspace").filter(key=key).first()
        if op is None:
            raise CommandError(f"no operation {key!r}")
        workspace = op.workspace
        try:
            with holding(workspace, "ledger-resolve") as fence:
                resolved = resolve_by_person(
                    fence, workspace, key, verdict, actor=f"person:{by}", note=note
                )
        except LeaseHeld as held:
            if op.state not in {Operation.State.AMBIGUOUS, Operation.State.DEAD}:
                raise CommandError(
                    f"{key} is {op.state}; only ambiguous or dead operations are resolved"
                ) from None
            submit_resolution(workspace, key, verdict, actor=f"person:{by}", note=note)
            self.stdout.write(f"{key}: {verdict}, queued for worker {held.owner}")
            return
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{key}: now {resolved.state}")


def replica_line(replica: JournalReplica | None) -> str:
    """``journal push: 3 transitions unconfirmed (lag 42s), last push ok at …, last error …``"""
    if replica is None:
        return "journal push: nothing pushed yet (no worker has served it since it was set)"
    now = timezone.now()
    parts = [f"journal push: {replica.unconfirmed} transitions unconfirmed"]
    if replica.unconfirmed:
        parts[0] += f" (lag {replica.lag_seconds(now):.0f}s)"
    ok = replica.last_ok_at
    parts.append(f"last push ok at {ok:%Y-%m-%d %H:%M:%S}" if ok else "no push confirmed yet")
    if replica.failures:
        parts.append(f"{replica.failures} failures in a row")
    if replica.last_error:
        when = f" at {replica.last_error_at:%Y-%m-%d %H:%M:%S}" if replica.last_error_at else ""
        parts.append(f"last error{when}: {' '.join(replica.last_error.split())[:300]}")
    line = ", ".join(parts)
    if replica.blocked:
        line += f"\n  REFUSED: {replica.blocked}"
    return line
