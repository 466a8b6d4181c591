"""The forms of the mission pages. They check only the shape of what was sent; the services
(``missions.services``) and the machine decide."""

from __future__ import annotations

from django import forms

from ephyra.core.mission import MissionState
from missions.evidence import KINDS, LINK_LIMIT, TEXT_LIMIT
from missions.models import ROLE_CHOICES
from missions.services import NOTE_LIMIT, TITLE_LIMIT

_KEY = {"max_length": 200}


class MissionFilterForm(forms.Form):
    workspace = forms.CharField(required=False, max_length=64)
    state = forms.ChoiceField(
        choices=[("", "any"), *((s.value, s.value) for s in MissionState)], required=False
    )


class CreateForm(forms.Form):
    workspace = forms.SlugField(max_length=64)
    title = forms.CharField(max_length=TITLE_LIMIT)
    key = forms.CharField(**_KEY)


class AddWorkPackageForm(forms.Form):
    title = forms.CharField(max_length=TITLE_LIMIT)
    key = forms.CharField(**_KEY)


class EvidenceFields(forms.Form):
    """One evidence item: its kind and the field of that kind (the file comes in FILES)."""

    evidence_kind = forms.ChoiceField(choices=[(k, k) for k in KINDS])
    evidence_text = forms.CharField(required=False, max_length=TEXT_LIMIT, strip=True)
    evidence_link = forms.CharField(required=False, max_length=LINK_LIMIT, strip=True)


class MoveForm(EvidenceFields):
    """A transition of the mission (``subject`` is its id) or of one of its work packages."""

    subject = forms.CharField(max_length=64)
    to = forms.CharField(max_length=16)
    role = forms.CharField(max_length=16)
    expected = forms.CharField(max_length=16, required=False)
    seen_head = forms.CharField(max_length=64)
    key = forms.CharField(**_KEY)
    note = forms.CharField(required=False, max_length=NOTE_LIMIT, strip=True)


class SupersedeForm(EvidenceFields):
    """Replace a FAILED work package (``subject``) or the FAILED mission by a new one."""

    subject = forms.CharField(max_length=64)
    title = forms.CharField(max_length=TITLE_LIMIT)
    role = forms.CharField(max_length=16)
    seen_head = forms.CharField(max_length=64, required=False)
    key = forms.CharField(**_KEY)


class LinkForm(forms.Form):
    """The quest carrying a work package: an existing quest's id, or blank for a new one."""

    wp = forms.CharField(max_length=64)
    quest = forms.CharField(max_length=128, required=False, strip=True)
    seen_head = forms.CharField(max_length=64)
    key = forms.CharField(**_KEY)


class RoleForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=ROLE_CHOICES)
    change = forms.ChoiceField(choices=[("grant", "grant"), ("revoke", "revoke")])
