import pytest

from ephyra.compose import effect_adapters
from journal.store import Journal
from quests.models import Workspace
from tests.ledger import recorder


@pytest.fixture
def workspace(tmp_path, db):
    """A workspace whose journals live in a real bare repository in tmp_path."""
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))


@pytest.fixture
def adapters(settings):
    """Route the agent, proof and landing effects to the in-process recorder."""
    recorder.reset()
    settings.EPHYRA_EFFECT_ADAPTERS = {
        name: "tests.ledger.recorder.Recorder"
        for name in ("start_agent", "stop_agent", "request_checkpoint", "run_proof", "land")
    }
    effect_adapters.cache_clear()
    yield recorder
    effect_adapters.cache_clear()
    recorder.reset()
