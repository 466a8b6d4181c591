from tests.quests.conftest import other_workspace, workspace  # noqa: F401  (fixtures)
