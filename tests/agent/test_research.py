"""Research on real repositories: frames mapped by path suffix, blame, ranked suspects, earlier
quests; the hypothesis a quest shows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from ephyra.agent import EarlierQuest, Frame, research
from ephyra.agent.frames import map_frames
from ephyra.core.events import EVIDENCE_LIMIT, HypothesisWritten
from tests.agent.repos import shop_history, shop_policy, workdir_for


def test_production_paths_map_to_the_repository_by_their_longest_suffix(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    found = research(
        workdir,
        shop.signal(prefix="/srv/app/releases/42"),
        head=shop.head,
        known_good=None,
        earlier=[],
    )

    assert [m.path for m in found.frames] == ["shop/cart.py", "shop/cart.py", "shop/views.py", None]
    assert found.frames[0].why == "the last 2 path component(s) match"
    assert found.frames[3].why == "no file of the repository is named base.py"
    summary = found.summary()
    assert summary.startswith("KeyError: 'quantity'\nRaised in shop/cart.py:6 in line_total")
    assert "3 of 4 frames map to files of the repository." in summary
    assert "Frame 4 (/usr/lib/python3/site-packages/django/core/handlers/base.py:197" in summary


def test_the_commit_that_changed_the_failing_function_is_the_first_suspect(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)

    found = research(workdir, shop.signal(), head=shop.head, known_good=shop.main[5], earlier=[])

    first = found.suspects[0]
    assert first.commit.sha == shop.culprit
    assert first.commit.author == "Rita Regress"
    assert first.reasons[0] == "changed line_total() (frame 1)"
    # the other suspects changed the file, not the function: they come after
    assert all(not s.reasons[0].startswith("changed line_total") for s in found.suspects[1:])
    assert found.window == f"since {shop.main[5][:12]}"
    assert f'1. {shop.culprit[:12]} "Read the quantity of each line directly"' in found.summary()


def test_blame_names_the_commit_that_last_changed_each_frames_line(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)

    found = research(workdir, shop.signal(), head=shop.head, known_good=None, earlier=[])

    assert [(b.path, b.commit.sha if b.commit else None) for b in found.blames] == [
        ("shop/cart.py", shop.culprit),
        ("shop/cart.py", shop.main[0]),
        ("shop/views.py", shop.main[0]),
    ]
    assert (
        f'Line 6 of shop/cart.py was last changed by {shop.culprit[:12]} "Read the quantity of '
        'each line directly" (Rita Regress, 2024-01-01).'
    ) in found.summary()


def test_the_window_is_the_last_walk_back_commits_without_a_known_good_one(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path)

    near = research(
        workdir,
        shop.signal(),
        head=shop.head,
        known_good=None,
        earlier=[],
        work=shop_policy(walk_back=5),
    )
    unknown = research(
        workdir,
        shop.signal(),
        head=shop.head,
        known_good="v0-nowhere",
        earlier=[],
        work=shop_policy(walk_back=12),
    )

    assert near.window == "in the last 5 first-parent commits"
    assert shop.culprit not in {s.commit.sha for s in near.suspects}  # 9 commits back
    assert unknown.window == "in the last 12 first-parent commits"
    assert shop.culprit in {s.commit.sha for s in unknown.suspects}
    assert (
        "The known-good commit 'v0-nowhere' is not in the repository's history" in unknown.summary()
    )


def test_a_signal_whose_frames_match_no_file_says_so_and_suspects_nothing(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    signal = replace(
        shop.signal(),
        frames=(
            Frame("/srv/billing/invoice.py", 12, "issue", "billing.invoice", True),
            Frame("<frozen importlib._bootstrap>", 241, "_call_with_frames_removed", None, False),
        ),
    )

    found = research(workdir, signal, head=shop.head, known_good=None, earlier=[])

    assert found.matched == () and found.blames == () and found.suspects == ()
    summary = found.summary()
    assert "0 of 2 frames map to files of the repository." in summary
    assert (
        "Frame 1 (/srv/billing/invoice.py:12 in issue): "
        "no file of the repository is named invoice.py." in summary
    )
    assert (
        "Frame 2 (<frozen importlib._bootstrap>:241 in _call_with_frames_removed): "
        "the frame names no file." in summary
    )
    assert "No frame of the application maps to a file: the suspects cannot be ranked." in summary


def test_two_files_that_fit_equally_are_named_not_guessed():
    ambiguous, by_module = map_frames(
        ["a/util.py", "b/util.py"],
        (
            Frame("/srv/util.py", 1, "f", None, True),
            Frame("/srv/util.py", 1, "f", "b.util", True),
        ),
    )

    assert ambiguous.path is None
    assert ambiguous.why == "2 files end with the same 1 path component(s)"
    assert ambiguous.candidates == ("a/util.py", "b/util.py")
    assert by_module.path == "b/util.py"  # the module tells them apart


def test_a_library_frame_does_not_match_a_file_by_its_name_alone():
    library, app = map_frames(
        ["shop/base.py"],
        (
            Frame("/usr/lib/python3/site-packages/django/base.py", 3, "get", "django.base", False),
            Frame("/srv/app/shop/base.py", 3, "get", "shop.base", True),
        ),
    )

    assert library.path is None and library.why.startswith("library code")
    assert app.path == "shop/base.py"


def test_a_frame_line_past_the_end_of_the_file_says_production_runs_other_code(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    signal = replace(
        shop.signal(),
        frames=(Frame("/srv/app/shop/views.py", 400, "checkout", "shop.views", True),),
    )

    found = research(workdir, signal, head=shop.head, known_good=None, earlier=[])

    assert found.blames[0].commit is None
    assert "Line 400 of shop/views.py: the line is past the end of the file" in found.summary()


def test_earlier_quests_and_how_they_ended_are_in_the_hypothesis(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    earlier = [
        EarlierQuest("q-7", "done", 1, "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432", None),
        EarlierQuest("q-9", "parked", 2, None, "revert_conflict"),
    ]

    found = research(workdir, shop.signal(), head=shop.head, known_good=None, earlier=earlier)

    assert (
        "Earlier quests of this error: q-7 landed 9f8e7d6c5b4a; q-9 parked (revert_conflict)."
        in found.summary()
    )
    assert found.to_evidence()["earlier"][1]["park_reason"] == "revert_conflict"


def test_the_hypothesis_is_what_the_event_accepts(tmp_path):
    shop = shop_history(tmp_path / "shop")
    workdir = workdir_for(shop, tmp_path)
    found = research(workdir, shop.signal(), head=shop.head, known_good=None, earlier=[])

    event = HypothesisWritten(
        id="e-1",
        quest="q-1",
        at=datetime.now(UTC),
        summary=found.summary(),
        evidence=found.to_evidence(),
    )

    assert event.evidence["suspects"][0]["sha"] == shop.culprit
    assert len(found.summary()) <= 4000 < EVIDENCE_LIMIT


def test_on_a_shallow_mirror_research_says_what_it_cannot_see(tmp_path):
    shop = shop_history(tmp_path / "shop", commits=24, culprit=15)
    workdir = workdir_for(shop, tmp_path, depth=3)

    found = research(workdir, shop.signal(), head=shop.head, known_good=None, earlier=[])

    summary = found.summary()
    assert "The mirror is shallow: history before its boundary is not searched" in summary
    assert found.window == "in the whole history (3 first-parent commits)"
    # the failing line is older than the mirror: blame stops at the boundary and says so
    assert found.blames[0].note.startswith("the line is older than the shallow mirror's history")
