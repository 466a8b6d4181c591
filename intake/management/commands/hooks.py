import getpass

from django.core.management.base import BaseCommand, CommandError

from intake.hooks.credentials import SecretUnavailable, env_reference, file_reference, read_secret
from intake.hooks.services import (
    hook_audit_created,
    hook_create,
    hook_delete,
    hook_endpoint,
    hook_switch,
)
from intake.models import Hook, WebhookDelivery
from quests.models import Workspace

KINDS = [kind.value for kind in Hook.Kind]


class Command(BaseCommand):
    help = "Register the forge hooks of a workspace and print the endpoint to give the forge."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="register a hook; the secret stays outside the database")
        add.add_argument("workspace")
        add.add_argument("kind", choices=KINDS)
        source = add.add_mutually_exclusive_group(required=True)
        source.add_argument("--secret-env", metavar="NAME", help="read the secret from $NAME")
        source.add_argument("--secret-file", metavar="PATH", help="read the secret from a file")
        source.add_argument(
            "--generate-token",
            action="store_true",
            help="GitLab only: make a token, print it once, keep only its salted digest",
        )
        add.add_argument("--url", default="", help="Ephyra's public address, to print full URLs")
        listing = sub.add_parser("list", help="list hooks and the endpoint of each")
        listing.add_argument("--workspace", default=None)
        listing.add_argument("--url", default="", help="Ephyra's public address")
        for name, text in (
            ("remove", "delete a hook (its deliveries are kept)"),
            ("disable", "refuse its deliveries with 404 until enabled"),
            ("enable", "take its deliveries again"),
        ):
            one = sub.add_parser(name, help=text)
            one.add_argument("workspace")
            one.add_argument("kind", choices=KINDS)

    def handle(self, *args, **options):
        action = options["action"]
        if action == "list":
            return self._list(options["workspace"], options["url"])
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        if action == "add":
            return self._add(workspace, options)
        hook = Hook.objects.filter(workspace=workspace, kind=options["kind"]).first()
        if hook is None:
            raise CommandError(f"workspace {workspace.slug} has no {options['kind']} hook")
        if action == "remove":
            hook_delete(hook, actor=operator())
            self.stdout.write(f"removed the {hook.kind} hook of {workspace.slug}")
            return
        try:
            hook_switch(hook, action == "enable", actor=operator())
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{action}d the {hook.kind} hook of {workspace.slug}")

    def _add(self, workspace, options):
        try:
            if options["generate_token"]:
                hook, token = hook_create(workspace, options["kind"], generate_token=True)
            elif options["secret_env"]:
                reference = env_reference(options["secret_env"])
                hook, token = hook_create(workspace, options["kind"], secret_ref=reference)
            else:
                reference = file_reference(options["secret_file"])
                hook, token = hook_create(workspace, options["kind"], secret_ref=reference)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        hook_audit_created(hook, actor=operator())
        endpoint = f"{options['url'].rstrip('/')}{hook_endpoint(hook)}"
        self.stdout.write(f"{hook.kind} hook of {workspace.slug}: {endpoint}")
        if token:
            self.stdout.write(f"secret token (shown once; paste it into GitLab): {token}")
        elif hook.secret_ref:
            try:
                read_secret(hook.secret_ref)
            except SecretUnavailable as exc:
                # The web process may have the variable even though this shell does not.
                self.stderr.write(f"warning: {exc} here; the web process must be able to read it")

    def _list(self, slug, url):
        hooks = Hook.objects.select_related("workspace").order_by("workspace__slug", "kind")
        if slug:
            hooks = hooks.filter(workspace__slug=slug)
        for hook in hooks:
            last = (
                WebhookDelivery.objects.filter(hook=hook)
                .order_by("-received_at")
                .values_list("received_at", flat=True)
                .first()
            )
            self.stdout.write(
                "\t".join(
                    [
                        hook.workspace.slug,
                        hook.kind,
                        f"{url.rstrip('/')}{hook_endpoint(hook)}",
                        hook.secret_ref or "token digest",
                        "active" if hook.active else "disabled",
                        f"last delivery {last.isoformat()}" if last else "no delivery yet",
                    ]
                )
            )


def operator() -> str:
    """Who changed a hook at the command line, for the audit chain: the host's user."""
    return f"manage.py:{getpass.getuser()}"
