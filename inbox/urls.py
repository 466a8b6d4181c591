from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from inbox import audit_views, ledger_views, policy_views, views, workspace_views

app_name = "inbox"

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="registration/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("q/<slug:slug>/<str:quest_id>/", views.quest, name="quest"),
    path("q/<slug:slug>/<str:quest_id>/act", views.quest_act, name="act"),
    path("w/<slug:slug>/source/<str:commit>/<path:path>", views.source, name="source"),
    path("ledger/", ledger_views.ledger, name="ledger"),
    path("ledger/resolve", ledger_views.ledger_resolve, name="ledger_resolve"),
    path("audit/", audit_views.audit, name="audit"),
    path("audit/verify", audit_views.audit_verify, name="audit_verify"),
    # Workspaces (admins; the list for anyone with a role)
    path("workspaces/", workspace_views.workspaces, name="workspaces"),
    path("workspaces/add", workspace_views.workspace_add_view, name="workspace_add"),
    path("w/<slug:slug>/", workspace_views.workspace, name="workspace"),
    path("w/<slug:slug>/tokens", workspace_views.token_create_view, name="token_create"),
    path(
        "w/<slug:slug>/tokens/<int:token_id>/revoke",
        workspace_views.token_revoke_view,
        name="token_revoke",
    ),
    path("w/<slug:slug>/hooks", workspace_views.hook_create_view, name="hook_create"),
    re_path(
        r"^w/(?P<slug>[-a-zA-Z0-9_]+)/hooks/(?P<kind>[a-z]+)/(?P<change>enable|disable|remove)$",
        workspace_views.hook_change_view,
        name="hook_change",
    ),
    # Policy (admins)
    path("w/<slug:slug>/policy/", policy_views.policy, name="policy"),
    path("w/<slug:slug>/policy/propose", policy_views.policy_propose_text, name="policy_propose"),
    path(
        "w/<slug:slug>/policy/propose-version",
        policy_views.policy_propose_earlier,
        name="policy_propose_version",
    ),
    path(
        "w/<slug:slug>/policy/<int:proposal_id>/approve",
        policy_views.policy_approve_proposal,
        name="policy_approve",
    ),
    path(
        "w/<slug:slug>/policy/<int:proposal_id>/reject",
        policy_views.policy_reject_proposal,
        name="policy_reject",
    ),
    path(
        "w/<slug:slug>/policy/<int:proposal_id>/withdraw",
        policy_views.policy_withdraw_proposal,
        name="policy_withdraw",
    ),
]
