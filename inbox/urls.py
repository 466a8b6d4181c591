from django.contrib.auth import views as auth_views
from django.urls import path

from inbox import audit_views, ledger_views, views

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
]
