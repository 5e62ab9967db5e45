"""The documentation's runnable examples (docs/examples/*.py): each one runs to the end, and each one is
included by a documentation page (pymdownx.snippets, ``--8<-- "docs/examples/<name>.py"``), so none goes
stale unnoticed and no page shows code that is not run here."""

import random
import re
import runpy
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = sorted((DOCS / "examples").glob("*.py"))
SNIPPET = re.compile(r"""^\s*--8<--\s+["']([^"']+)["']""", re.MULTILINE)


def included_snippets() -> dict[str, list[str]]:
    """``{snippet path relative to the repository root: [pages including it]}`` over every docs page."""
    included: dict[str, list[str]] = {}
    for page in sorted(DOCS.rglob("*.md")):
        for path in SNIPPET.findall(page.read_text(encoding="utf-8")):
            included.setdefault(path, []).append(str(page.relative_to(ROOT)))
    return included


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Run in a scratch directory and leave the global random states as they were."""
    monkeypatch.chdir(tmp_path)
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    yield
    torch.random.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


def test_there_are_examples():
    assert len(EXAMPLES) >= 8, [path.name for path in EXAMPLES]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_runs(path, isolated, capsys):
    """The script runs as ``python docs/examples/<name>.py`` would (``__name__ == "__main__"``) and prints."""
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_:  # a script may end with sys.exit(0)
        assert exit_.code in (None, 0), f"{path.name} exited with {exit_.code!r}"
    assert capsys.readouterr().out.strip(), f"{path.name} printed nothing"


def test_every_example_is_included_by_a_page():
    included = included_snippets()
    missing = [path.name for path in EXAMPLES if str(path.relative_to(ROOT)) not in included]
    assert not missing, f"docs/examples files no page includes with --8<--: {missing}"


def test_every_included_snippet_exists():
    dangling = {path: pages for path, pages in included_snippets().items() if not (ROOT / path).is_file()}
    assert not dangling, f"pages include files that do not exist: {dangling}"
