"""The core imports only the pure standard library and pydantic: what makes replay exact."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_THIRD_PARTY = {"pydantic"}
# Standard-library modules that reach the outside world, a clock or randomness.
IMPURE_STDLIB = {
    "random",
    "secrets",
    "uuid",
    "time",
    "os",
    "io",
    "pathlib",
    "shutil",
    "socket",
    "ssl",
    "subprocess",
    "threading",
    "multiprocessing",
    "asyncio",
    "sqlite3",
    "urllib",
    "http",
    "logging",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("ephyra.core"):
                continue
            names.add(node.module.split(".")[0])
    return names


def test_the_core_imports_only_the_standard_library_and_pydantic():
    offenders = {}
    for path in sorted((ROOT / "ephyra" / "core").rglob("*.py")):
        outside = {
            name
            for name in _imports(path)
            if name in IMPURE_STDLIB
            or (name not in sys.stdlib_module_names and name not in ALLOWED_THIRD_PARTY)
        }
        if outside:
            offenders[str(path.relative_to(ROOT))] = sorted(outside)
    assert offenders == {}


def test_the_core_never_reads_a_clock_or_draws_randomness():
    banned = ("datetime.now", "datetime.utcnow", "time.time", "random.", "uuid.uuid4", "open(")
    found = []
    for path in sorted((ROOT / "ephyra" / "core").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {word}" for word in banned if word in text]
    assert found == []
