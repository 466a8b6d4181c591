"""The forms people fill in on the dashboard: the inbox's filters, and an action on a quest.

Forms only check the shape of what was sent; the action layer (``quests.actions``) decides."""

from __future__ import annotations

from django import forms

from ephyra.core.states import Severity, State
from quests.actions import COMMENT_LIMIT
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
