"""The admin of workspaces, policy versions and the quest projections.

Workspaces and policy versions change only through their services (``workspace_create``,
``quests.policies``): each add form calls the service from its validation, so a refusal shows
on the form, and the admin itself saves nothing. A version becomes current only through an
approved proposal (four eyes): the admin proposes, the dashboard's policy page approves.
Quests are read-only.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils.html import format_html

from ephyra.policy import PolicyError
from ephyra.readonly_admin import ReadOnlyAdmin
from quests.models import PolicyVersion, Quest, Workspace
from quests.policies import (
    PolicyDuplicate,
    PolicyRefused,
    policy_propose_version,
    policy_version_add,
)
from quests.workspaces import workspace_create


class WorkspaceAddForm(forms.ModelForm):
    """``manage.py workspace add`` as a form: mirror the repository and register it."""

    slug = forms.SlugField(max_length=64)
    source = forms.CharField(
        max_length=1000, help_text="Path or URL of the repository (without credentials)."
    )
    base_branch = forms.CharField(
        max_length=200, initial="main", help_text="The branch fixes land on; it must exist."
    )
    name = forms.CharField(max_length=200, required=False)

    class Meta:
        model = Workspace
        # Every model field is set by workspace_create, none by this form, and none is
        # validated again on the model: the service did it.
        fields = ()
        exclude = ("slug", "name", "base_branch")  # noqa: DJ006

    def clean_slug(self) -> str:
        slug = self.cleaned_data["slug"]
        if Workspace.objects.filter(slug=slug).exists():
            raise ValidationError(f"workspace {slug!r} already exists")
        return slug

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            self.instance = workspace_create(
                data["slug"], data["source"], base_branch=data["base_branch"], name=data["name"]
            )
        except ValueError as refused:
            raise ValidationError(str(refused)) from None
        return data


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    """Added through ``workspace_create``; afterwards only the display name changes. Its
    repository, branch and remote were checked when it was made, and its policy changes by an
    approved proposal. Never deleted here: its audit log is append-only."""

    list_display = ("slug", "name", "base_branch", "repository", "current_policy")
    search_fields = ("slug", "name")
    readonly_fields = ("slug", "repository", "base_branch", "remote", "current_policy")
    fields = ("slug", "name", "repository", "base_branch", "remote", "current_policy")

    @admin.display(description="current policy")
    def current_policy(self, workspace: Workspace) -> str:
        return workspace.policy.digest if workspace.policy_id else "the default policy"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = WorkspaceAddForm
            kwargs["fields"] = ()
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("slug", "source", "base_branch", "name")
        return self.fields

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:
        if change:  # the name only: the rest is read-only
            super().save_model(request, obj, form, change)
        # An added workspace was made by workspace_create when its form was validated.

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class PolicyVersionAddForm(forms.ModelForm):
    # The text exactly as typed (its digest is the version), but for the line ends: browsers
    # send a textarea's as CRLF, and a policy file has LF.
    text = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={"rows": 30, "cols": 100, "spellcheck": "false"}),
        help_text="The autonomy policy in YAML (docs/policy.md).",
    )

    class Meta:
        model = PolicyVersion
        fields = ("workspace", "text")

    reviewer = ""  # set per request by PolicyVersionAdmin.get_form

    def clean_text(self) -> str:
        return self.cleaned_data["text"].replace("\r\n", "\n")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            self.instance = policy_version_add(
                data["workspace"], data["text"], reviewed_by=self.reviewer
            )
        except PolicyError as invalid:
            raise ValidationError(
                [
                    f"line {line if line is not None else '?'}: {path or '(top)'}: {message}"
                    for path, line, message in invalid.problems
                ]
            ) from None
        except PolicyDuplicate as duplicate:
            raise ValidationError(str(duplicate)) from None
        return data


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    """A version is a reviewed text, never edited or deleted: a change is a new version. Which
    version is current is decided by four eyes: the action below proposes one, and a second
    admin approves the proposal on the dashboard's policy page (``quests.policies``)."""

    list_display = ("workspace", "digest", "current", "reviewed_by", "created_at")
    list_filter = ("workspace",)
    readonly_fields = ("workspace", "digest", "text", "reviewed_by", "created_at")
    actions = ("propose_current",)

    @admin.display(boolean=True, description="current")
    def current(self, version: PolicyVersion) -> bool:
        return version.workspace.policy_id == version.pk

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("workspace")

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = type(
                "PolicyVersionAddForm",
                (PolicyVersionAddForm,),
                {"reviewer": request.user.get_username()},
            )
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        return ("workspace", "text") if obj is None else self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:
        """Nothing to save: policy_version_add stored the version when the form was validated."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Propose the selected version as its workspace's current policy")
    def propose_current(self, request, queryset) -> None:
        """Four eyes: this opens a proposal; another admin of the workspace approves it on the
        dashboard's policy page, and only then does the version become current."""
        versions = list(queryset.select_related("workspace")[:2])
        if len(versions) != 1:
            self.message_user(
                request, "Select exactly one policy version to propose.", messages.ERROR
            )
            return
        [version] = versions
        try:
            proposal = policy_propose_version(request.user, version, "proposed in the admin")
        except (PolicyRefused, PermissionDenied) as refused:
            self.message_user(request, f"Not proposed: {refused}", messages.ERROR)
            return
        page = reverse("inbox:policy", args=[version.workspace.slug])
        self.message_user(
            request,
            format_html(
                "Policy {} is proposed as the policy of {} (proposal #{}); another admin "
                'approves it on <a href="{}">its policy page</a>.',
                version.digest,
                version.workspace.slug,
                proposal.pk,
                page,
            ),
        )


@admin.register(Quest)
class QuestAdmin(ReadOnlyAdmin):
    """A quest moves only through the engine; its row is the projection of its journal."""

    list_display = ("quest_id", "workspace", "state", "revision", "severity", "claim", "updated_at")
    list_filter = ("state", "severity", "workspace")
    search_fields = ("quest_id", "fingerprint", "title")
