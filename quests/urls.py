from django.urls import path

from quests import views

urlpatterns = [
    path("lifecycle/", views.home, name="home"),
]
