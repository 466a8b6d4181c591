"""The API's paths: /api/v1/... (docs/api.md), the schema and its documentation page, the
meaning of each problem type, and a 404 problem for anything else under /api/."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import mission_views as m
from api import quest_views as q
from api import workspace_views as w
from api.problems import not_found, problem_page

WS = "v1/workspaces/<slug:ws>"
QUEST = f"{WS}/quests/<str:quest_id>"
MISSION = f"{WS}/missions/<str:mid>"

v1 = [
    path("v1/me", w.Me.as_view(), name="me"),
    path("v1/workspaces", w.Workspaces.as_view(), name="workspaces"),
    path(WS, w.WorkspaceDetail.as_view(), name="workspace"),
    path("v1/quests", q.QuestsAcross.as_view(), name="quests_across"),
    path(f"{WS}/quests", q.QuestsOf.as_view(), name="quests"),
    path(QUEST, q.QuestDetail.as_view(), name="quest"),
    *(
        path(f"{QUEST}/{name}", view.as_view(), name=f"quest_{name}")
        for name, view in q.ACTION_VIEWS.items()
    ),
    path(f"{QUEST}/events", q.QuestEvents.as_view(), name="quest_events"),
    path(f"{WS}/ledger", w.Ledger.as_view(), name="ledger"),
    path(f"{WS}/ledger/<path:op_key>/resolve", w.LedgerResolve.as_view(), name="ledger_resolve"),
    path(f"{WS}/audit", w.Audit.as_view(), name="audit"),
    path(f"{WS}/audit/verify", w.AuditVerify.as_view(), name="audit_verify"),
    path(f"{WS}/policy/versions", w.PolicyVersions.as_view(), name="policy_versions"),
    path(f"{WS}/policy/versions/<int:n>", w.PolicyVersionDetail.as_view(), name="policy_version"),
    path(f"{WS}/policy/proposals", w.PolicyPropose.as_view(), name="policy_propose"),
    *(
        path(
            f"{WS}/policy/proposals/<int:proposal_id>/{step}", view.as_view(), name=f"policy_{step}"
        )
        for step, view in w.STEP_VIEWS.items()
    ),
    path(f"{WS}/missions", m.Missions.as_view(), name="missions"),
    path(MISSION, m.MissionDetail.as_view(), name="mission"),
    path(f"{MISSION}/transition", m.MissionTransition.as_view(), name="mission_transition"),
    path(f"{MISSION}/wps", m.WpAdd.as_view(), name="wp_add"),
    path(f"{MISSION}/wps/<str:wp>/transition", m.WpTransition.as_view(), name="wp_transition"),
    path(f"{MISSION}/wps/<str:wp>/supersede", m.WpSupersede.as_view(), name="wp_supersede"),
    path(f"{MISSION}/wps/<str:wp>/quest", m.WpLink.as_view(), name="wp_link"),
    path(f"{MISSION}/evidence", m.EvidenceUpload.as_view(), name="evidence_upload"),
]

app_name = "api"

urlpatterns = [
    *v1,
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("problems/<str:name>", problem_page, name="problem"),
    re_path(r"^(?P<path>.*)$", not_found),
]
