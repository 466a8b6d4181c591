from django.urls import path

from api import pages

app_name = "api_pages"

urlpatterns = [
    path("", pages.tokens, name="tokens"),
    path("new", pages.token_new, name="token_new"),
    path("<str:prefix>/revoke", pages.token_revoke_view, name="token_revoke"),
]
