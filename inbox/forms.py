"""The forms people fill in on the dashboard: the inbox's filters, an action on a quest, and the
admin's policy and workspace forms.

Forms only check the shape of what was sent; the action layer (``quests.actions``) decides."""

from __future__ import annotations

from django import forms

from ephyra.core.states import Severity, State
from intake.models import Hook
from quests.actions import COMMENT_LIMIT
from quests.policies import NOTE_LIMIT
from quests.selectors import SORTS

TABS = {
    "waiting": "Waiting for a person",
    "checkpoint": "At a checkpoint",
    "mine": "Claimed by me",
    "claimed": "Claimed",
    "parked": "Parked",
    "all": "All quests",
}


def _choices(values, blank: str = "any") -> list[tuple[str, str]]:
    return [("", blank), *((str(v), str(v).replace("_", " ")) for v in values)]


class InboxFilterForm(forms.Form):
    tab = forms.ChoiceField(choices=list(TABS.items()), required=False)
    workspace = forms.CharField(required=False, max_length=64)
    state = forms.ChoiceField(choices=_choices(State), required=False)
    checkpoint = forms.ChoiceField(choices=_choices("ABC"), required=False)
    severity = forms.ChoiceField(choices=_choices(Severity), required=False)
    route = forms.ChoiceField(
        choices=_choices(["auto_fix", "research_only", "human", "ignore"]), required=False
    )
    unclaimed = forms.BooleanField(required=False, label="Unclaimed only")
    q = forms.CharField(required=False, max_length=200, label="Search title or fingerprint")
    sort = forms.ChoiceField(
        choices=[(key, key) for key in SORTS], required=False, label="Sort by"
    )


ACTIONS = ("claim", "release", "decide", "comment", "pause", "resume", "kill")


class ActionForm(forms.Form):
    """One action on a quest. ``seen_head``/``seen_revision`` are what the page showed;
    ``key`` is the form's one-time token, so a double submission applies once."""

    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    seen_head = forms.CharField(max_length=64, required=False)
    seen_revision = forms.IntegerField(min_value=0, required=False)
    key = forms.CharField(max_length=200)
    checkpoint = forms.ChoiceField(choices=_choices("ABC", ""), required=False)
    verdict = forms.ChoiceField(
        choices=[("", ""), ("approve", "approve"), ("revise", "revise"), ("reject", "reject")],
        required=False,
    )
    # One text field for the comment, the decision's comment, or the reason to pause or kill.
    text = forms.CharField(
        required=False,
        max_length=COMMENT_LIMIT,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "maxlength": COMMENT_LIMIT}),
    )

    def clean(self):
        data = super().clean()
        action = data.get("action")
        if action != "comment" and not data.get("seen_head"):
            raise forms.ValidationError("this form is missing the state it was shown for")
        if action == "decide" and not (data.get("checkpoint") and data.get("verdict")):
            raise forms.ValidationError("a decision names its checkpoint and verdict")
        return data


# --- the admin's pages: policy and workspaces ---------------------------------------------

POLICY_TEXT_LIMIT = 200_000  # characters; a policy is a page or two of YAML


class PolicyEditForm(forms.Form):
    """A policy text to check or to propose. The text is kept exactly as typed (its digest is
    the version) but for the line ends: browsers send a textarea's as CRLF, a policy file has
    LF."""

    text = forms.CharField(
        strip=False,
        max_length=POLICY_TEXT_LIMIT,
        widget=forms.Textarea(attrs={"rows": 24, "spellcheck": "false", "wrap": "off"}),
        label="Policy (YAML)",
    )
    note = forms.CharField(
        required=False,
        max_length=NOTE_LIMIT,
        widget=forms.Textarea(attrs={"rows": 2, "maxlength": NOTE_LIMIT}),
        label="Why (for the approver)",
    )
    intent = forms.ChoiceField(choices=[("propose", "propose"), ("check", "check")], required=False)

    def clean_text(self) -> str:
        return self.cleaned_data["text"].replace("\r\n", "\n")


class PolicyVersionForm(forms.Form):
    """Propose an existing version (a roll back): the version is named by its id."""

    version = forms.IntegerField(min_value=1)
    note = forms.CharField(required=False, max_length=NOTE_LIMIT)


class PolicyDecisionForm(forms.Form):
    """A rejection's or a withdrawal's reason (the service says when one is required)."""

    reason = forms.CharField(required=False, max_length=NOTE_LIMIT)


class WorkspaceAddForm(forms.Form):
    """``manage.py workspace add`` as a form; ``quests.workspaces.workspace_add`` decides."""

    slug = forms.SlugField(max_length=64, help_text="Short name in URLs: letters, digits, -, _.")
    source = forms.CharField(
        max_length=1000,
        label="Repository",
        help_text="Path or URL of the repository, without credentials (git's credential "
        "helper supplies them). It is mirrored under the data directory.",
    )
    base_branch = forms.CharField(
        max_length=200, initial="main", help_text="The branch fixes land on; it must exist."
    )
    name = forms.CharField(max_length=200, required=False, help_text="Display name (optional).")


class OnceForm(forms.Form):
    """A form whose ``key`` is checked once (``inbox.workspace_views``): a double click or a
    resubmitted page does not make a second secret."""

    key = forms.RegexField(regex=r"^[0-9a-f]{32}$", error_messages={"invalid": "a bad form key"})


class TokenCreateForm(OnceForm):
    name = forms.CharField(
        max_length=100, required=False, help_text="What the token is for (a service, a host)."
    )


class HookCreateForm(OnceForm):
    kind = forms.ChoiceField(choices=Hook.Kind.choices, label="Forge")
