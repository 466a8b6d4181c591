"""What the API takes (input serializers: DRF validates, a bad field is a 400 naming it) and
what it answers (output serializers: the schema documents exactly what is rendered)."""

from __future__ import annotations

from rest_framework import serializers as s

from ephyra.core.states import Severity, State
from quests.actions import COMMENT_LIMIT

HEAD = {"max_length": 64, "help_text": "The journal head you read (GET); a moved one is a 409."}


# --- input -------------------------------------------------------------------------------------


class QuestFilters(s.Serializer):
    workspace = s.SlugField(required=False, max_length=64)
    state = s.ChoiceField(choices=[x.value for x in State], required=False)
    checkpoint = s.ChoiceField(choices=["A", "B", "C"], required=False)
    severity = s.ChoiceField(choices=[x.value for x in Severity], required=False)
    route = s.CharField(required=False, max_length=20)
    mine = s.BooleanField(required=False, default=False)
    unclaimed = s.BooleanField(required=False, default=False)
    waiting = s.BooleanField(required=False, default=False, help_text="only quests that wait")
    q = s.CharField(required=False, max_length=200, help_text="text in the title, or a fingerprint")
    cursor = s.CharField(required=False, max_length=200)
    limit = s.IntegerField(required=False, min_value=1, max_value=200, default=50)


class Head(s.Serializer):
    head = s.CharField(**HEAD)


class Decide(Head):
    checkpoint = s.ChoiceField(choices=["A", "B", "C"])
    decision = s.ChoiceField(choices=["approve", "revise", "reject"])
    comment = s.CharField(required=False, allow_blank=True, default="", max_length=COMMENT_LIMIT)


class Comment(s.Serializer):
    body = s.CharField(max_length=COMMENT_LIMIT)
    head = s.CharField(required=False, allow_blank=True, max_length=64)


class Reason(Head):
    reason = s.CharField(required=False, allow_blank=True, default="", max_length=COMMENT_LIMIT)


class Kill(Head):
    reason = s.CharField(max_length=COMMENT_LIMIT)


class LedgerFilters(s.Serializer):
    state = s.CharField(required=False, max_length=20)
    type = s.CharField(required=False, max_length=40)
    quest = s.CharField(required=False, max_length=128)
    cursor = s.CharField(required=False, max_length=200)
    limit = s.IntegerField(required=False, min_value=1, max_value=200, default=50)


class Resolve(s.Serializer):
    verdict = s.ChoiceField(
        choices=["done", "absent", "dead", "succeeded", "failed"],
        help_text="done (it happened), absent (it did not: deliver again), dead (it did not, "
        "never try again); succeeded and failed are the same as done and dead",
    )
    note = s.CharField(max_length=COMMENT_LIMIT)


class Page(s.Serializer):
    cursor = s.CharField(required=False, max_length=200)
    limit = s.IntegerField(required=False, min_value=1, max_value=200, default=50)


class PolicyText(s.Serializer):
    text = s.CharField(max_length=200_000, trim_whitespace=False)
    note = s.CharField(required=False, allow_blank=True, default="", max_length=2000)


class ReasonOnly(s.Serializer):
    reason = s.CharField(required=False, allow_blank=True, default="", max_length=2000)


class Title(s.Serializer):
    title = s.CharField(max_length=200)


class Transition(s.Serializer):
    to = s.CharField(max_length=40)
    role = s.CharField(max_length=20)
    evidence = s.DictField(
        required=False,
        default=dict,
        help_text='one item: {"kind": "text", "text": ...}, {"kind": "link", "link": ...}, '
        '{"kind": "file", "sha256": ..., "name": ...} (uploaded first), {"kind": "proof"}, '
        '{"kind": "quest"}; or {"<evidence name>": "<text>"}',
    )
    note = s.CharField(required=False, allow_blank=True, default="", max_length=4000)
    expected = s.CharField(required=False, allow_blank=True, default="", max_length=40)
    head = s.CharField(required=False, allow_blank=True, default="", max_length=64)


class Supersede(s.Serializer):
    title = s.CharField(max_length=200)
    role = s.CharField(max_length=20)
    evidence = s.DictField(required=False, default=dict)
    head = s.CharField(required=False, allow_blank=True, default="", max_length=64)


class Link(s.Serializer):
    quest = s.CharField(required=False, allow_blank=True, default="", max_length=128)
    head = s.CharField(required=False, allow_blank=True, default="", max_length=64)


class Upload(s.Serializer):
    file = s.FileField()


# --- output ------------------------------------------------------------------------------------


class WorkspaceRoles(s.Serializer):
    slug = s.CharField()
    roles = s.ListField(child=s.CharField())


class Me(s.Serializer):
    username = s.CharField()
    workspaces = WorkspaceRoles(many=True)
    token = s.DictField(allow_null=True, help_text="the token's prefix, role, workspaces, expiry")


class WorkspaceOut(s.Serializer):
    slug = s.CharField()
    name = s.CharField()
    base_branch = s.CharField()
    roles = s.ListField(child=s.CharField())
    policy = s.CharField(allow_null=True, help_text="the current policy's digest")


class WorkspaceList(s.Serializer):
    results = WorkspaceOut(many=True)


class QuestSummary(s.Serializer):
    id = s.CharField()
    workspace = s.CharField()
    title = s.CharField(allow_blank=True)
    state = s.CharField()
    checkpoint = s.CharField(allow_null=True)
    severity = s.CharField()
    risk = s.CharField(allow_null=True)
    revision = s.IntegerField()
    head = s.CharField()
    claimed_by = s.CharField(allow_null=True)
    signals = s.IntegerField()
    created_at = s.DateTimeField()
    updated_at = s.DateTimeField()
    url = s.CharField()


class QuestList(s.Serializer):
    results = QuestSummary(many=True)
    next = s.CharField(allow_null=True)
    count = s.IntegerField()
    count_capped = s.BooleanField()


class TimelineEntry(s.Serializer):
    at = s.DateTimeField()
    event = s.CharField()
    type = s.CharField()
    actor = s.CharField(allow_blank=True)
    outcome = s.CharField()
    state = s.CharField(allow_null=True)
    summary = s.CharField(allow_blank=True)


class Proof(s.Serializer):
    digest = s.CharField(allow_blank=True)
    matches = s.BooleanField()
    checks = s.ListField(child=s.DictField())
    verdict = s.CharField()


class Effect(s.Serializer):
    key = s.CharField()
    type = s.CharField()
    state = s.CharField()


class QuestDetail(QuestSummary):
    timeline = TimelineEntry(many=True)
    evidence = s.DictField()
    proof = Proof(allow_null=True)
    effects = Effect(many=True)
    offers = s.ListField(child=s.CharField(), help_text="actions your roles allow now")


class ActionAnswer(s.Serializer):
    status = s.CharField(help_text="applied or queued")
    event = s.CharField()
    quest = QuestSummary()


class EventQueued(s.Serializer):
    status = s.CharField(help_text="queued or applied")
    event = s.CharField()


class Operation(s.Serializer):
    key = s.CharField()
    workspace = s.CharField()
    quest = s.CharField(allow_blank=True)
    type = s.CharField()
    state = s.CharField()
    attempts = s.IntegerField()
    created_at = s.DateTimeField()
    updated_at = s.DateTimeField()
    payload = s.DictField()
    outcome = s.DictField(allow_null=True)


class OperationList(s.Serializer):
    results = Operation(many=True)
    next = s.CharField(allow_null=True)


class Resolution(s.Serializer):
    status = s.CharField(help_text="applied or queued")
    key = s.CharField()
    verdict = s.CharField()
    state = s.CharField(allow_blank=True, help_text="the operation's state after the verdict")


class AuditEntry(s.Serializer):
    sequence = s.IntegerField()
    at = s.DateTimeField()
    actor = s.CharField()
    action = s.CharField()
    object = s.CharField()
    payload = s.DictField()
    hash = s.CharField()


class AuditList(s.Serializer):
    results = AuditEntry(many=True)
    next = s.CharField(allow_null=True)


class AuditVerdict(s.Serializer):
    ok = s.BooleanField()
    entries = s.IntegerField()
    first_bad = s.IntegerField(allow_null=True)
    problem = s.CharField(allow_blank=True)


class PolicyVersionOut(s.Serializer):
    number = s.IntegerField()
    digest = s.CharField()
    current = s.BooleanField()
    reviewed_by = s.CharField(allow_blank=True)
    created_at = s.DateTimeField()


class PolicyVersionText(PolicyVersionOut):
    text = s.CharField(allow_blank=True)


class PolicyVersionList(s.Serializer):
    results = PolicyVersionOut(many=True)
    proposals = s.ListField(child=s.DictField())


class ProposalOut(s.Serializer):
    id = s.IntegerField()
    state = s.CharField()
    digest = s.CharField()
    proposed_by = s.CharField()
    decided_by = s.CharField(allow_null=True)
    note = s.CharField(allow_blank=True)
    reason = s.CharField(allow_blank=True)


class MissionSummary(s.Serializer):
    id = s.CharField()
    workspace = s.CharField()
    title = s.CharField(allow_blank=True)
    state = s.CharField()
    head = s.CharField()
    wp_counts = s.DictField(child=s.IntegerField())
    url = s.CharField()


class MissionList(s.Serializer):
    results = MissionSummary(many=True)
    next = s.CharField(allow_null=True)


class MissionDetail(MissionSummary):
    roles = s.ListField(child=s.CharField(), help_text="your roles on the mission")
    people = s.DictField()
    offers = s.ListField(child=s.DictField())
    work_packages = s.ListField(child=s.DictField())
    ledger = s.ListField(child=s.DictField())
    history = s.ListField(child=s.DictField())
    supersedes = s.CharField(allow_blank=True)
    superseded_by = s.ListField(child=s.CharField())


class MissionAnswer(s.Serializer):
    status = s.CharField(help_text="applied or duplicate")
    mission = MissionDetail()


class Uploaded(s.Serializer):
    sha256 = s.CharField()
    size = s.IntegerField()
    name = s.CharField()
