"""The documentation site as a reader gets it: it builds with ``mkdocs build --strict``, no Sphinx cross-reference
markup shows as text in its HTML (``:class:`x``` is not Markdown: docstrings use mkdocstrings' ``[`x`][path]``;
``docs/tools/convert_roles.py`` converts them), and every file or folder docs/architecture.md names exists.

One build per session (a module-scoped fixture, a few seconds)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lightning_spectral"
# A role as docstring Markdown renders it: :class:<code>~a.b.C</code> (or with its backticks left as text).
HTML_ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|mod|data|obj|exc|const|ref|doc):(?:<code>|`)([^<`]+)")
SOURCE_ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|mod|data|obj|exc|const):`(~?[^`]+)`")
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly (any warning fails the build) into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],  # no --quiet: it hides warnings
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def test_no_sphinx_roles_in_the_html(site: Path) -> None:
    shown = []
    for page in sorted(site.rglob("*.html")):
        for role, target in HTML_ROLE.findall(page.read_text(encoding="utf-8")):
            shown.append(f"{page.relative_to(site)}: :{role}:`{target}`")
    assert not shown, (
        "Sphinx role markup shows as text on the site; convert the docstrings with "
        "`python docs/tools/convert_roles.py` (mkdocstrings' [`name`][path] links):\n" + "\n".join(shown[:40])
    )


def test_no_roles_in_the_sources() -> None:
    """Every module's docstrings are converted (roles there would reach the site once rendered)."""
    left = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for match in SOURCE_ROLE.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not left, "run `python docs/tools/convert_roles.py`:\n" + "\n".join(left[:40])


def test_make_bench_runs_every_benchmark() -> None:
    """docs/benchmarks/index.md says `make bench` runs every script in benchmarks/: each one is named in that target."""
    page = (ROOT / "docs" / "benchmarks" / "index.md").read_text(encoding="utf-8")
    assert "`make bench` runs every script" in page  # the claim this test holds the Makefile to
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^bench:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target, "the Makefile has no bench target"
    named = set(re.findall(r"benchmarks/(\w+\.py)", target.group(1)))
    scripts = {path.name for path in (ROOT / "benchmarks").glob("*.py")}
    assert scripts <= named, f"scripts `make bench` does not run: {sorted(scripts - named)}"


def named_paths(text: str) -> list[str]:
    """Every code span of a page that names a file or folder (``x.py``, ``a/b.py``, ``dir/``)."""
    spans = re.findall(r"`([^`\n]+)`", text)
    return sorted({span for span in spans if re.fullmatch(r"[\w./-]+", span) and re.search(r"\.py$|/", span)})


def missing_paths(text: str) -> list[str]:
    """The named paths that exist neither in the package nor from the repository root."""
    return [path for path in named_paths(text) if not ((PACKAGE / path).exists() or (ROOT / path).exists())]


def test_architecture_names_real_paths() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert len(named_paths(text)) > 20  # the page names its modules; an empty list would check nothing
    missing = missing_paths(text)
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_architecture_names_every_module() -> None:
    """The layers table is the package: every top-level module and subpackage of lightning_spectral is named."""
    named = set(named_paths((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")))
    modules = {path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    packages = {f"{path.name}/" for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    missing = sorted((modules | packages) - named)
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_the_path_check_reports_a_stale_module() -> None:
    """``encoders.py`` became the package ``encoders/``: a page naming the old module is reported."""
    page = "| training | `callbacks/`, `encoders.py`, `io/`, `data/` | ... |"
    assert missing_paths(page) == ["encoders.py"]


def test_make_gpu_check_says_in_one_line_that_there_is_no_cuda_and_exits_0(tmp_path) -> None:
    """`make gpu-check` without CUDA: one line, exit 0, the page untouched; with CUDA it rewrites only its section."""
    import os
    import subprocess
    import sys

    page = tmp_path / "gpu.md"
    page.write_text("# B\n", encoding="utf-8")
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--page", str(page)],
        capture_output=True, text=True, env=environment, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gpu-check: no CUDA device (torch.cuda.is_available() is False): nothing run, docs/benchmarks/gpu.md unchanged."
    ]
    assert page.read_text(encoding="utf-8") == "# B\n"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_check import END, START, rewrite_section
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    text = (ROOT / "docs" / "benchmarks" / "gpu.md").read_text(encoding="utf-8")
    assert text.count(START) == text.count(END) == 1  # the section the command rewrites
    rewritten = rewrite_section(text, "Device: X")
    assert rewritten.split(START)[0] == text.split(START)[0] and rewritten.split(END)[1] == text.split(END)[1]
    assert "Device: X" in rewritten
