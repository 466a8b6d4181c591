"""Deployments: recorded once, applied to the watching quests whose landed commit they carry
(Git ancestry in the mirror), kept while a quest is still landing or the mirror lacks the
commit, and applied when they can be."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from intake.deployments.services import deployment_record
from intake.hooks.services import hook_create
from intake.models import Deployment, WebhookDelivery
from ledger.models import InboundEvent
from tests.intake.conftest import SECRET, deliver, fixture
from tests.landing.test_adapters import use_policy
from tests.watch.conftest import POLICY, git, landed, landing, quest, settle, watch


def record(ws, commit: str, environment: str = "production", source: str = "test"):
    return deployment_record(
        ws, commit=commit, environment=environment, source=source, at=timezone.now()
    )


def test_a_deployment_before_landing_is_applied_once_the_quest_lands(repos, shop, worker):
    head = landing(shop, repos)
    early = record(shop, head).deployment
    assert (early.state, early.reason) == (
        "pending",
        "pending: q1 still landing (applies to no watching quest so far)",
    )

    settle(worker)

    value = quest(shop)
    assert (str(value.state), value.deployed_commit, value.deployed_to) == (
        "watching",
        head,
        "production",
    )
    early.refresh_from_db()
    assert (early.state, early.quests, early.reason) == ("decided", ["q1"], "applied to q1")
    assert InboundEvent.objects.filter(type="deployment_observed").count() == 1


def test_a_commit_the_mirror_lacks_is_fetched_and_then_applied(repos, shop, worker):
    head = landed(shop, repos, worker)
    later = repos.push_as_person("hello ", "hi ", "Friendlier greeting")  # only on the remote

    row = record(shop, later).deployment
    assert row.state == "pending" and row.reason.startswith(
        f"pending: the mirror lacks commit {later}"
    )
    settle(worker)

    row.refresh_from_db()
    assert (row.state, row.quests) == ("decided", ["q1"])
    value = quest(shop)
    assert (value.deployed_commit, value.landed_commit) == (later, head)


def test_a_deployment_of_a_commit_without_the_landed_one_applies_to_no_quest(repos, shop, worker):
    head = landed(shop, repos, worker)
    before = git(repos.mirror, "rev-parse", f"{head}^")

    row = record(shop, before).deployment

    assert (row.state, row.quests, row.reason) == (
        "decided",
        [],
        "applies to no watching quest",
    )
    settle(worker)
    assert quest(shop).deployed_commit is None
    assert not InboundEvent.objects.filter(type="deployment_observed").exists()


def test_a_staging_deployment_is_recorded_and_opens_no_watch(repos, shop, worker):
    use_deployment_policy(shop)
    head = landed(shop, repos, worker)

    row = record(shop, head, environment="staging").deployment
    settle(worker)

    assert (row.state, row.reason) == (
        "decided",
        "staging is not production: recorded, no watch opens",
    )
    assert quest(shop).deployed_commit is None
    assert not shop.watches.exists()  # starts: deployment, and no production deployment


def test_a_deployment_is_recorded_once_per_commit_and_environment(repos, shop, worker):
    head = landed(shop, repos, worker)
    first = record(shop, head, source="webhook:github")
    again = record(shop, head, source="command")
    assert (first.created, first.applied) == (True, ("q1",))
    assert (again.created, again.applied) == (False, ())
    assert Deployment.objects.count() == 1
    assert InboundEvent.objects.filter(type="deployment_observed").count() == 1


def use_deployment_policy(ws) -> None:
    use_policy(ws, POLICY.format(starts="deployment", new=0))


# --- manage.py deployed ------------------------------------------------------------------------


def deployed(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("deployed", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_the_deployed_command_applies_a_deployment_and_says_to_which_quest(repos, shop, worker):
    head = landed(shop, repos, worker)
    assert deployed("shop", head) == (
        f"deployment of {head} to production recorded: decided, applied to q1"
    )
    assert deployed("shop", head) == (
        f"deployment of {head} to production already recorded: decided, applied to q1"
    )
    settle(worker)
    assert quest(shop).deployed_commit == head


def test_the_deployed_command_fetches_first_and_resolves_a_short_commit(repos, shop, worker):
    landed(shop, repos, worker)
    later = repos.push_as_person("hello ", "hi ", "Friendlier greeting")
    said = deployed("shop", later[:10], "--environment", "production")
    assert said == f"deployment of {later} to production recorded: decided, applied to q1"


def test_the_deployed_command_says_why_a_deployment_waits(repos, shop):
    head = landing(shop, repos)
    assert deployed("shop", head) == (
        f"deployment of {head} to production recorded: pending, "
        "pending: q1 still landing (applies to no watching quest so far)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope", "a" * 40), "no workspace 'nope'"),
        (
            ("shop", "not-a-commit"),
            "'not-a-commit' is not a commit of shop: give the full commit id that was deployed",
        ),
    ],
)
def test_the_deployed_command_refuses_an_unknown_workspace_or_a_non_commit(
    repos, shop, args, message
):
    with pytest.raises(CommandError) as refused:
        deployed(*args)
    assert str(refused.value) == message
    assert not Deployment.objects.exists()


def test_of_two_deployments_kept_while_landing_the_earlier_opens_the_watch(repos, shop, worker):
    head = landing(shop, repos)
    first = deployment_record(
        shop, commit=head, source="test", at=timezone.now() - timedelta(minutes=2)
    ).deployment
    # A later build on top of the patch, which a CI/CD made from its branch.
    later = git(repos.mirror, "commit-tree", f"{head}^{{tree}}", "-p", head, "-m", "Build 2")
    second = record(shop, later).deployment

    settle(worker)

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.quests, second.quests) == (["q1"], [])
    assert quest(shop).deployed_commit == head
    assert watch(shop).since == first.at


def test_a_deployment_pending_for_a_day_is_given_up(repos, shop, worker):
    landed(shop, repos, worker)
    row = record(shop, "ab" * 20).deployment  # a commit no branch of the remote has
    assert row.state == "pending"
    Deployment.objects.filter(pk=row.pk).update(recorded_at=timezone.now() - timedelta(hours=25))

    settle(worker)

    row.refresh_from_db()
    assert row.state == "decided"
    assert row.reason.startswith(
        f"given up after 24 h: pending: the mirror lacks commit {row.commit}"
    )


def test_a_forge_deployment_before_landing_waits_and_its_delivery_says_why(
    repos, shop, worker, client, monkeypatch
):
    monkeypatch.setenv("EPHYRA_TEST_HOOK_SECRET", SECRET)
    hook_create(shop, "github", secret_ref="env:EPHYRA_TEST_HOOK_SECRET")
    head = landing(shop, repos)
    payload = fixture("github", "deployment_status")
    payload["deployment"]["sha"] = head

    response = deliver(client, "github", "deployment_status", payload)

    assert (response.status_code, response.json()) == (200, {"status": "recorded"})
    row = WebhookDelivery.objects.get()
    assert (row.outcome, row.details["deployment"], row.details["reason"]) == (
        "recorded",
        "pending",
        "pending: q1 still landing (applies to no watching quest so far)",
    )
    settle(worker)
    assert quest(shop).deployed_commit == head
    assert Deployment.objects.get().source == "webhook:github"
