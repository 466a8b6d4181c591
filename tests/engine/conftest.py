import pytest

from journal.store import Journal
from quests.models import Workspace


@pytest.fixture
def workspace(tmp_path, db):
    """A workspace whose journals live in a real bare repository in tmp_path."""
    path = tmp_path / "mirror.git"
    Journal.init(path, bare=True)
    return Workspace.objects.create(slug="shop", name="Shop", repository=str(path))
