from django.urls import path, re_path

from missions import views

app_name = "missions"

urlpatterns = [
    path("", views.mission_list, name="list"),
    path("new", views.mission_create, name="create"),
    re_path(
        r"^(?P<slug>[-a-zA-Z0-9_]+)/evidence/(?P<sha256>[0-9a-f]{64})/(?P<name>[^/]+)$",
        views.evidence_file,
        name="evidence",
    ),
    path("<slug:slug>/<str:mission_id>/", views.mission_page, name="mission"),
    path("<slug:slug>/<str:mission_id>/move", views.mission_move, name="move"),
    path("<slug:slug>/<str:mission_id>/supersede", views.mission_supersede, name="supersede"),
    path("<slug:slug>/<str:mission_id>/link", views.mission_link, name="link"),
    path("<slug:slug>/<str:mission_id>/wps", views.mission_add_wp, name="add_wp"),
    path("<slug:slug>/<str:mission_id>/roles", views.mission_roles_change, name="roles"),
]
