"""A workspace with people holding mission roles, and a person's hands on the mission pages:
read the forms a page offers, and send one of them as the browser would."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser

import pytest

from ephyra.core.events import Killed
from quests.engine import quest_apply
from quests.roles import Role
from tests.core.story import T0
from tests.quests import conftest as quests
from tests.quests.conftest import drive, person

# The quests' fixtures, shared: a workspace ``shop`` and another one ``other``.
workspace, other_workspace = quests.workspace, quests.other_workspace

PEOPLE = {
    # name: (workspace roles in shop, mission roles given on each mission)
    "ada": ([Role.ADMIN], ["lead"]),  # creates the missions, so leads them
    "mia": ([Role.REVIEWER], ["maker"]),
    "dan": ([Role.REVIEWER], ["debugger"]),
    "cora": ([Role.REVIEWER], ["checker"]),
    "hugo": ([Role.REVIEWER], ["human"]),
    "hal": ([Role.REVIEWER], ["higher"]),
}


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def people(workspace, data_dir):
    return {name: person(name, shop=roles) for name, (roles, _) in PEOPLE.items()}


@dataclass
class Form:
    action: str
    fields: dict[str, str] = field(default_factory=dict)  # hidden inputs and selects' first
    radios: dict[str, list[str]] = field(default_factory=dict)


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append(Form(a.get("action", "")))
        elif not self.forms:
            return
        elif tag == "input" and a.get("type") == "hidden":
            self.forms[-1].fields[a["name"]] = a.get("value", "")
        elif tag == "input" and a.get("type") == "radio":
            self.forms[-1].radios.setdefault(a["name"], []).append(a["value"])
        elif tag == "select":
            self._select = a.get("name")
        elif tag == "option" and self._select:
            self.forms[-1].fields.setdefault(self._select, a.get("value", ""))

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def forms_of(html: str) -> list[Form]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms


def page_url(mission_id: str, slug: str = "shop") -> str:
    return f"/missions/{slug}/{mission_id}/"


def offered(client, mission_id: str, subject: str, to: str = "", kind: str = "move") -> Form | None:
    """The form the mission page offers the logged-in person for moving ``subject`` to ``to``
    (or superseding it, ``kind="supersede"``); None when the page does not offer it."""
    html = client.get(page_url(mission_id)).content.decode()
    for form in forms_of(html):
        if form.fields.get("subject") != subject:
            continue
        if kind == "supersede" and form.action.endswith("/supersede"):
            return form
        if kind == "move" and form.action.endswith("/move") and form.fields.get("to") == to:
            return form
    return None


def send(client, form: Form, **fields):
    """Send ``form`` as the page built it, with ``fields`` filled in (or overridden)."""
    return client.post(form.action, {**form.fields, **fields})


def move(client, mission_id: str, subject: str, to: str, *, evidence="noted", **fields):
    """Move ``subject`` through the form the page offers (failing if it offers none), with
    text evidence unless ``fields`` say otherwise; the answer must be applied."""
    form = offered(client, mission_id, subject, to)
    assert form is not None, f"the page offers no move of {subject} to {to}"
    data = {"evidence_kind": "text", "evidence_text": evidence, **fields}
    answer = send(client, form, **data)
    assert answer.status_code == 303, answer.status_code
    assert answer["X-Ephyra-Outcome"] == "applied", _message(client, mission_id)
    return answer


def _message(client, mission_id: str) -> str:
    html = client.get(page_url(mission_id)).content.decode()
    found = re.search(r'<ul class="messages".*?</ul>', html, re.S)
    return found.group(0) if found else "(no message)"


def message_after(client, answer) -> str:
    """The last message the page shows after an action's redirect (earlier ones were not read
    yet when the test sent several forms without looking)."""
    html = client.get(answer["Location"]).content.decode()
    found = re.search(r'<ul class="messages"[^>]*>(.*?)</ul>', html, re.S)
    items = re.findall(r"<li[^>]*>(.*?)</li>", found.group(1), re.S) if found else [""]
    text = re.sub(r"<[^>]+>", " ", items[-1])
    return " ".join(text.replace("&#x27;", "'").replace("&quot;", '"').split())


def create_mission(client, title: str, *, key: str = "create-1") -> str:
    answer = client.post("/missions/new", {"workspace": "shop", "title": title, "key": key})
    assert answer.status_code == 303, answer.status_code
    return answer["Location"].rstrip("/").rsplit("/", 1)[-1]


def grant(client, mission_id: str, username: str, role: str):
    answer = client.post(
        f"/missions/shop/{mission_id}/roles",
        {"username": username, "role": role, "change": "grant"},
    )
    assert answer.status_code == 303
    return answer


def add_wp(client, mission_id: str, title: str, key: str):
    answer = client.post(f"/missions/shop/{mission_id}/wps", {"title": title, "key": key})
    assert answer["X-Ephyra-Outcome"] == "applied", _message(client, mission_id)


def link(client, mission_id: str, wp_id: str, quest: str = ""):
    form = next(
        f
        for f in forms_of(client.get(page_url(mission_id)).content.decode())
        if f.action.endswith("/link") and f.fields.get("wp") == wp_id
    )
    answer = send(client, form, quest=quest)
    assert answer["X-Ephyra-Outcome"] == "applied", _message(client, mission_id)


def abandon(workspace, quest_id: str) -> None:
    """Kill a quest (test set-up: applied straight through the engine)."""
    event = Killed(
        id=f"{quest_id}-kill", quest=quest_id, at=T0 + timedelta(days=1), actor="ada",
        reason="a dead end",
    )  # fmt: skip
    assert quest_apply(workspace, event).applied.decision.accepted


@pytest.fixture
def planned(client, people, workspace):
    """A mission m1 led by ada with its people, three WPs each carried by a quest ready with
    its proof, the mission RUNNING and every WP READY: where the seed's scenarios start."""
    client.force_login(people["ada"])
    mission_id = create_mission(client, "Checkout revamp")
    for name, (_, roles) in PEOPLE.items():
        for role in roles:
            if name != "ada":
                grant(client, mission_id, name, role)
    for n, title in enumerate(["Reproduce", "Fix", "Prove"], 1):
        add_wp(client, mission_id, title, key=f"wp-{n}")
    move(client, mission_id, mission_id, "planning", evidence="brief: docs/checkout.md")
    for n in (1, 2, 3):
        drive(workspace, f"q{n}", "ready")
        link(client, mission_id, f"wp{n}", quest=f"q{n}")
        move(client, mission_id, f"wp{n}", "ready", evidence="plan v1")
    move(client, mission_id, mission_id, "ready", evidence="plan v1 validated")
    move(client, mission_id, mission_id, "running", evidence="go")
    return mission_id
