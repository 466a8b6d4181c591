import pytest
from django.contrib.auth import get_user_model


@pytest.mark.django_db
def test_the_start_page_asks_for_a_login_and_the_lifecycle_page_lists_the_states(client):
    response = client.get("/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/")
    assert client.get("/lifecycle/").status_code == 302
    client.force_login(get_user_model().objects.create_user("ann", password="pw"))
    body = client.get("/lifecycle/").content.decode()
    assert "<code>handed_off</code>" in body


@pytest.mark.django_db
def test_the_admin_lets_a_superuser_in(client):
    get_user_model().objects.create_superuser("admin", "admin@example.com", "correct horse")
    assert client.login(username="admin", password="correct horse")
    response = client.get("/admin/")
    assert response.status_code == 200
    assert "Site administration" in response.content.decode()


@pytest.mark.django_db
def test_the_start_page_refuses_a_post(client):
    client.force_login(get_user_model().objects.create_user("ann", password="pw"))
    assert client.post("/").status_code == 405
