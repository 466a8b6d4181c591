"""From forge payloads to facts to quest events, without a database: the pure half."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ephyra.core.events import (
    BaseMoved,
    ChecksReported,
    CommentAdded,
    ForgeCheck,
)
from ephyra.core.states import State
from ephyra.webhooks.facts import (
    CheckResult,
    Comment,
    Deployment,
    Ignored,
    PayloadInvalid,
    Ping,
    Push,
    Review,
    ReviewRef,
    linked_quests,
    parse_time,
)
from ephyra.webhooks.webhooks import (
    OpenQuest,
    base_matters,
    concerned,
    deployed_landing,
    for_workspace,
    parse_delivery,
    quest_events,
)
from tests.intake.conftest import BASE_NEW, BASE_OLD, LANDED, PATCH, fixture

NOW = datetime(2026, 12, 2, 15, 30, tzinfo=UTC)


def events_of(fact, quests, delivery="d-1", prefix="gh"):
    return quest_events(fact, quests, prefix=prefix, delivery=delivery, received_at=NOW)


# --- payloads to facts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "event", "name"),
    [
        ("github", "push", "push"),
        ("gitlab", "Push Hook", "push"),
        ("gitea", "push", "push"),
        ("forgejo", "push", "push"),
    ],
)
def test_every_forges_push_states_the_same_fact(kind, event, name):
    fact = parse_delivery(kind, event, fixture(kind if kind != "forgejo" else "gitea", name))
    assert isinstance(fact, Push)
    assert (fact.ref, fact.before, fact.after) == ("refs/heads/main", BASE_OLD, BASE_NEW)
    assert BASE_NEW in fact.commits
    assert fact.actor.startswith(f"{kind}:")


def test_a_github_ping_is_a_ping():
    assert parse_delivery("github", "ping", fixture("github", "ping")) == Ping()


def test_a_github_comment_on_a_pull_request_names_the_quest_of_its_marker():
    fact = parse_delivery("github", "issue_comment", fixture("github", "issue_comment"))
    assert fact == Comment(
        body="Does this also cover carts restored from a saved session?",
        actor="github:mona",
        at=datetime(2026, 12, 2, 11, 20, 13, tzinfo=UTC),
        quests=frozenset({"checkout-500"}),
        review=ReviewRef("acme/shop", 42),
    )


def test_a_github_pull_request_from_an_ephyra_branch_names_its_quest():
    fact = parse_delivery("github", "pull_request", fixture("github", "pull_request"))
    assert fact == Review(
        ReviewRef("acme/shop", 43), "opened", frozenset({"checkout-500"}), PATCH, "github:mona"
    )


def test_a_successful_github_deployment_names_the_deployed_commit():
    fact = parse_delivery("github", "deployment_status", fixture("github", "deployment_status"))
    assert fact == Deployment(
        LANDED, "production", "github:octocat", datetime(2026, 12, 2, 15, 4, 11, tzinfo=UTC)
    )


def test_a_failed_github_deployment_is_ignored():
    payload = fixture("github", "deployment_status")
    payload["deployment_status"]["state"] = "failure"
    fact = parse_delivery("github", "deployment_status", payload)
    assert fact == Ignored("deployment failure: only successful deployments are recorded")


def test_a_finished_github_check_run_is_a_check_result():
    fact = parse_delivery("github", "check_run", fixture("github", "check_run"))
    assert isinstance(fact, CheckResult)
    assert (fact.sha, fact.name, fact.conclusion) == (PATCH, "tests (3.11)", "success")


def test_a_running_github_check_run_is_ignored():
    payload = fixture("github", "check_run")
    payload["check_run"] |= {"status": "in_progress", "conclusion": None}
    assert isinstance(parse_delivery("github", "check_run", payload), Ignored)


def test_a_gitlab_merge_request_note_names_the_quest_of_its_source_branch():
    fact = parse_delivery("gitlab", "Note Hook", fixture("gitlab", "note"))
    assert isinstance(fact, Comment)
    assert fact.quests == {"checkout-500"}
    assert fact.actor == "gitlab:ann"
    assert fact.at == datetime(2026, 12, 2, 11, 21, 36, tzinfo=UTC)


def test_a_gitlab_deployment_names_the_full_commit_from_its_url():
    fact = parse_delivery("gitlab", "Deployment Hook", fixture("gitlab", "deployment"))
    assert fact == Deployment(
        LANDED, "production", "gitlab:root", datetime(2026, 12, 2, 15, 50, tzinfo=UTC), True
    )


def test_a_gitlab_deployment_without_a_commit_url_keeps_the_short_sha():
    payload = fixture("gitlab", "deployment") | {"commit_url": None}
    assert parse_delivery("gitlab", "Deployment Hook", payload).sha == "c0ffee15"


def test_a_gitlab_pipeline_is_a_check_result():
    fact = parse_delivery("gitlab", "Pipeline Hook", fixture("gitlab", "pipeline"))
    assert isinstance(fact, CheckResult)
    assert (fact.sha, fact.name, fact.conclusion) == (PATCH, "pipeline", "failed")


def test_a_gitlab_confidential_note_stays_out_of_the_journal():
    fact = parse_delivery("gitlab", "Confidential Note Hook", fixture("gitlab", "note"))
    assert isinstance(fact, Ignored)


def test_a_gitea_comment_on_a_pull_request_names_its_review():
    fact = parse_delivery("gitea", "issue_comment", fixture("gitea", "issue_comment"))
    assert isinstance(fact, Comment)
    assert fact.quests == {"checkout-500"}
    assert fact.review == ReviewRef("acme/shop", 5)
    assert fact.actor == "gitea:ann"


@pytest.mark.parametrize(
    ("kind", "event"),
    [("github", "star"), ("gitlab", "Wiki Page Hook"), ("gitea", "release"), ("forgejo", "fork")],
)
def test_an_unknown_event_type_is_ignored_not_refused(kind, event):
    assert isinstance(parse_delivery(kind, event, {}), Ignored)


def test_an_edited_comment_is_ignored():
    payload = fixture("github", "issue_comment") | {"action": "edited"}
    assert isinstance(parse_delivery("github", "issue_comment", payload), Ignored)


def test_a_deleted_branch_is_not_a_base_move():
    payload = fixture("github", "push") | {"deleted": True, "after": "0" * 40}
    assert isinstance(parse_delivery("github", "push", payload), Ignored)


def test_a_payload_missing_a_field_it_needs_names_the_field_not_its_value():
    payload = fixture("github", "push")
    del payload["after"]
    payload["before"] = "not-a-sha-SECRETVALUE"
    with pytest.raises(PayloadInvalid) as caught:
        parse_delivery("github", "push", payload)
    message = str(caught.value)
    assert message.startswith("invalid push payload: ")
    assert "before" in message and "after: Field required" in message
    assert "SECRETVALUE" not in message


def test_gitlab_times_are_read_in_all_the_forms_gitlab_sends():
    assert parse_time("2026-12-02 11:21:36 UTC") == datetime(2026, 12, 2, 11, 21, 36, tzinfo=UTC)
    assert parse_time("2026-12-02 16:50:00 +0100") == datetime(2026, 12, 2, 15, 50, tzinfo=UTC)
    assert parse_time("2026-12-02T11:21:36Z") == datetime(2026, 12, 2, 11, 21, 36, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_time("yesterday")


def test_a_quest_is_named_by_branch_or_marker_and_nothing_else():
    assert linked_quests("ephyra/q-1", None) == {"q-1"}
    assert linked_quests("refs/heads/ephyra/q-1", "<!-- ephyra:quest=q-2 -->") == {"q-1", "q-2"}
    assert linked_quests("feature/ephyra/q-1", "ephyra:quest=q-3") == frozenset()
    assert linked_quests("ephyra/bad:id", "<!-- ephyra:quest=-x -->") == frozenset()


# --- facts to quest events ---------------------------------------------------------------------

PUSH = Push("refs/heads/main", BASE_OLD, BASE_NEW, ("0" * 39 + "1", BASE_NEW), "github:octocat")


def quest(qid, state, **kw):
    return OpenQuest(qid, State(state), **kw)


def test_a_push_to_the_base_moves_it_for_every_quest_whose_proof_depends_on_it():
    quests = [
        quest("q-ready", "ready", base=BASE_OLD, patch_head=PATCH),
        quest("q-proving", "proving", base=BASE_OLD, patch_head=PATCH),
        quest("q-landing", "landing", base=BASE_OLD, patch_head=PATCH),
        quest("q-held", "handed_off", base=BASE_OLD, patch_head=PATCH, resume_state=State.READY),
        quest("q-parked", "parked", base=BASE_OLD, patch_head=PATCH, resume_state=State.LANDING),
    ]
    events = events_of(PUSH, quests, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert [type(e) for e in events] == [BaseMoved] * 5
    assert [e.quest for e in events] == ["q-held", "q-landing", "q-parked", "q-proving", "q-ready"]
    assert [e.id for e in events] == [
        f"gh-72d3162e-cc78-11e3-81ab-4c9367dc0958-{n}" for n in range(5)
    ]
    assert {(e.base, e.at, e.actor) for e in events} == {(BASE_NEW, NOW, "github:octocat")}


@pytest.mark.parametrize(
    "open_quest",
    [
        quest("researching", "researching"),
        quest("patching", "patching", base=BASE_OLD, patch_head=PATCH),  # its patch names a base
        quest("watching", "watching", base=BASE_OLD, patch_head=PATCH, landed_commit=LANDED),
        quest("held-at-a", "handed_off", resume_state=State.HYPOTHESISED),
        quest("parked-research", "parked", resume_state=State.RESEARCHING),
        quest("already", "ready", base=BASE_NEW, patch_head=PATCH),  # the machine would refuse
        quest("own-landing", "landing", base=BASE_OLD, patch_head=BASE_NEW),  # its own commit
    ],
)
def test_a_push_leaves_quests_whose_base_does_not_matter_alone(open_quest):
    assert events_of(PUSH, [open_quest]) == []


def test_base_matters_from_the_recorded_patch_until_it_lands():
    assert base_matters(quest("q", "ready", patch_head=PATCH))
    assert not base_matters(quest("q", "ready"))
    assert not base_matters(quest("q", "watching", patch_head=PATCH, landed_commit=LANDED))


def test_a_push_to_another_branch_is_ignored():
    other = Push("refs/heads/feature", BASE_OLD, BASE_NEW, (), "github:octocat")
    assert isinstance(for_workspace(other, "main"), Ignored)
    assert for_workspace(PUSH, "main") is PUSH
    assert isinstance(for_workspace(PUSH, "trunk"), Ignored)


def test_a_comment_becomes_a_comment_on_each_active_quest_it_names():
    fact = Comment("Looks right.", "gitlab:ann", None, frozenset({"a", "b", "c"}))
    quests = [quest("b", "ready"), quest("a", "handed_off"), quest("c", "closed")]
    events = events_of(fact, quests, prefix="gl")
    assert [(type(e), e.quest, e.id, e.body, e.at) for e in events] == [
        (CommentAdded, "a", "gl-d-1-0", "Looks right.", NOW),
        (CommentAdded, "b", "gl-d-1-1", "Looks right.", NOW),
    ]
    assert not any(e.reply_requested for e in events)


def test_a_long_comment_is_cut_to_what_an_event_holds():
    fact = Comment("x" * 5000, "github:mona", NOW, frozenset({"a"}))
    (event,) = events_of(fact, [quest("a", "ready")])
    assert len(event.body) == 4000 and event.body.endswith("…")


def test_the_same_delivery_always_names_the_same_events():
    quests = [quest("q2", "ready", patch_head=PATCH), quest("q1", "proving", patch_head=PATCH)]
    assert events_of(PUSH, quests) == events_of(PUSH, list(reversed(quests)))


def test_a_deployment_names_the_landed_commit_by_its_prefix_whole():
    fact = Deployment("c0ffee15", "production", "gitlab:root", None)
    assert deployed_landing(fact, quest("w1", "watching", landed_commit=LANDED)) == (
        LANDED,
        LANDED,
    )
    assert deployed_landing(fact, quest("w2", "watching", landed_commit="d" * 40)) is None
    assert deployed_landing(fact, quest("w3", "ready", landed_commit=LANDED)) is None
    assert events_of(fact, [quest("w1", "watching", landed_commit=LANDED)]) == []  # decided later


LATER = "e1" * 20  # a commit of the base branch after LANDED


def test_a_deployment_of_a_later_commit_carries_the_landed_one_when_the_repository_says_so():
    fact = Deployment(LATER, "production", "github:octocat", NOW, True)
    watching = quest("w1", "watching", landed_commit=LANDED)
    asked = []

    def contains(deployed, landed):
        asked.append((deployed, landed))
        return True

    assert deployed_landing(fact, watching, contains) == (LATER, LANDED)
    assert asked == [(LATER, LANDED)]
    assert deployed_landing(fact, watching, lambda d, landed: False) is None
    assert deployed_landing(fact, watching, lambda d, landed: None) is None  # cannot tell


def test_a_check_result_concerns_the_quests_whose_patch_it_ran_on():
    fact = CheckResult(PATCH, "tests", "success", "github:octocat", None)
    quests = [quest("p", "proving", patch_head=PATCH), quest("o", "ready", patch_head="e" * 40)]
    assert concerned(fact, quests) == ["p"]
    (event,) = events_of(fact, quests)
    assert (type(event), event.quest, event.head, event.checks, event.at) == (
        ChecksReported,
        "p",
        PATCH,
        (ForgeCheck(name="tests", passed=True),),
        NOW,
    )


@pytest.mark.parametrize(
    ("conclusion", "passed"),
    [
        ("success", True),
        ("failure", False),
        ("failed", False),
        ("error", False),
        ("timed_out", False),
        ("action_required", False),
        ("neutral", None),
        ("skipped", None),
        ("cancelled", None),
        ("canceled", None),
        ("stale", None),
        ("warning", None),
    ],
)
def test_a_forges_conclusion_passes_fails_or_says_nothing(conclusion, passed):
    fact = CheckResult(PATCH, "tests", conclusion, "github:octocat", None)
    events = events_of(fact, [quest("p", "ready", patch_head=PATCH)])
    assert [e.checks[0].passed for e in events] == ([] if passed is None else [passed])


@pytest.mark.parametrize(
    "open_quest",
    [
        quest("patching", "patching", patch_head=PATCH),  # a new head is on its way
        quest("watching", "watching", patch_head=PATCH, landed_commit=LANDED),
        quest("other-head", "ready", patch_head="e" * 40),
    ],
)
def test_a_check_reaches_no_quest_it_decides_nothing_for(open_quest):
    fact = CheckResult(PATCH, "tests", "failure", "github:octocat", None)
    assert events_of(fact, [open_quest]) == []


def test_a_gitea_commit_status_is_a_check_result():
    fact = parse_delivery("gitea", "status", fixture("gitea", "status"))
    assert fact == CheckResult(
        PATCH,
        "ci / tests (push)",
        "failure",
        "gitea:gitea-actions",
        datetime(2026, 12, 2, 14, 46, 31, tzinfo=UTC),
        {"url": "https://gitea.example.com/acme/shop/actions/runs/57/jobs/0"},
    )
    pending = fixture("gitea", "status") | {"state": "pending"}
    assert parse_delivery("forgejo", "status", pending) == Ignored(
        "commit status pending: only final statuses are recorded"
    )


def test_a_github_commit_status_is_a_check_result_once_it_is_final():
    payload = {
        "sha": PATCH,
        "state": "failure",
        "context": "ci/jenkins",
        "updated_at": "2026-12-02T12:05:00Z",
        "target_url": "https://ci.example.com/job/42",
        "sender": {"login": "jenkins"},
    }
    fact = parse_delivery("github", "status", payload)
    assert fact == CheckResult(
        PATCH,
        "ci/jenkins",
        "failure",
        "github:jenkins",
        datetime(2026, 12, 2, 12, 5, tzinfo=UTC),
        {"url": "https://ci.example.com/job/42"},
    )
    assert isinstance(parse_delivery("github", "status", payload | {"state": "pending"}), Ignored)


def test_a_github_review_comment_names_the_quest_of_its_pull_requests_branch():
    pull = fixture("github", "pull_request")["pull_request"]
    comment = fixture("github", "issue_comment")["comment"]
    payload = {
        "action": "created",
        "comment": comment,
        "pull_request": pull,
        "repository": {"full_name": "acme/shop"},
    }
    fact = parse_delivery("github", "pull_request_review_comment", payload)
    assert isinstance(fact, Comment)
    assert (fact.quests, fact.review) == ({"checkout-500"}, ReviewRef("acme/shop", 43))


def test_a_gitlab_merge_request_from_an_ephyra_branch_names_its_quest():
    payload = {
        "object_kind": "merge_request",
        "user": {"username": "ann"},
        "project": {"path_with_namespace": "acme/shop"},
        "object_attributes": {
            "iid": 1,
            "source_branch": "ephyra/checkout-500",
            "description": "",
            "action": "open",
            "last_commit": {"id": PATCH},
        },
    }
    fact = parse_delivery("gitlab", "Merge Request Hook", payload)
    assert fact == Review(
        ReviewRef("acme/shop", 1), "open", frozenset({"checkout-500"}), PATCH, "gitlab:ann"
    )
