from django.urls import re_path

from intake.hooks import views

app_name = "intake"

# A trailing slash is accepted too: forges POST to the URL exactly as it was pasted, and a
# redirect would lose the body.
urlpatterns = [
    re_path(
        r"^(?P<kind>github|gitlab|gitea|forgejo)/(?P<slug>[-a-zA-Z0-9_]+)/?$",
        views.receive,
        name="receive",
    ),
]
