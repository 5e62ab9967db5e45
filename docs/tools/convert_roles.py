"""Convert Sphinx cross-reference roles in the package's docstrings to mkdocstrings' syntax.

``:class:`~a.b.C``` becomes ``[`C`][a.b.C]`` when the API reference renders ``a.b.C`` (a link), else the plain
name ``C`` in backticks; the same for ``:meth:``, ``:func:``, ``:attr:``, ``:mod:``, ``:data:``, ``:obj:``,
``:exc:``. Unqualified targets (``:meth:`summary```) are resolved as Sphinx would: the enclosing class, then the
module's names, then the one rendered object whose path ends with them. Roles in comments become plain names.

What the reference renders is read from the inventory (``objects.inv``) of a site built from the current docs:
the script builds one into a temporary folder unless ``--inventory`` names one. Converted text holds no role, so a
second run changes nothing (idempotent); run it again after merging code that brings new roles::

    python docs/tools/convert_roles.py                      # every file under lightning_spectral/
    python docs/tools/convert_roles.py lightning_spectral/viz.py lightning_spectral/cli
    python docs/tools/convert_roles.py --check              # list what would change, change nothing (exit 1 if any)

Run it from the repository root with the project's Python (it imports the package to resolve names).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import io
import os
import re
import subprocess
import sys
import tempfile
import tokenize
import zlib
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "lightning_spectral"
WIDTH = 120  # pyproject's [tool.ruff] line-length
ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|mod|data|obj|exc|const):`(~?)([^`<>]+?)(\(\))?`(\\? s\b)?")


def read_inventory(path: Path) -> dict[str, str]:
    """Every identifier of a Sphinx-format ``objects.inv`` (mkdocstrings lists the alias paths it renders and the
    canonical paths they point to), mapped to the identifier of the heading it renders (the alias path)."""
    data = path.read_bytes()
    start = 0
    for _ in range(4):
        start = data.index(b"\n", start) + 1
    names: dict[str, str] = {}
    for line in zlib.decompress(data[start:]).decode().splitlines():
        if not line.strip():
            continue
        name, _, _, uri = line.split(" ", 4)[:4]
        anchor = uri.partition("#")[2].replace("$", name)
        names[name] = anchor or name
    return names


def build_inventory() -> dict[str, str]:
    """Build the site into a temporary folder and read the inventory it writes."""
    with tempfile.TemporaryDirectory() as site:
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "-d", site], cwd=ROOT, env=env, check=True, capture_output=True
        )
        return read_inventory(Path(site) / "objects.inv")


def module_name(path: Path) -> str:
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_path(dotted: str) -> Optional[Any]:
    """The object a dotted path names (the longest importable module prefix, then attributes), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = static_attr(obj, name)
            if obj is None:
                return None
        return obj
    return None


def static_attr(owner: Any, name: str) -> Optional[Any]:
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return getattr(owner, name, None)


def canonical(obj: Any, owner: Any = None, name: str = "") -> Optional[str]:
    """The defining path of a class, function or module; for a member of a class, its defining class's path."""
    if inspect.ismodule(obj):
        return obj.__name__
    if owner is not None and inspect.isclass(owner):
        for base in owner.__mro__:
            if name in vars(base):
                return f"{base.__module__}.{base.__qualname__}.{name}"
    target = getattr(obj, "__func__", obj)
    if isinstance(target, property):
        target = target.fget
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname:
        return f"{module}.{qualname}"
    return None


class Resolver:
    def __init__(self, inventory: dict[str, str]) -> None:
        self.inventory = inventory

    def identifier(self, target: str, module: str, owner: Optional[str]) -> Optional[str]:
        """The rendered identifier a role's target names in its context, or None."""
        candidates: list[str] = []
        if target.startswith(PACKAGE + "."):
            candidates.append(target)
        else:
            scopes = ([f"{module}.{owner}"] if owner else []) + [module, PACKAGE]
            candidates += [f"{scope}.{target}" for scope in scopes]
        for dotted in candidates:
            found = self.rendered(dotted)
            if found:
                return found
        primary = {anchor for name, anchor in self.inventory.items() if name.endswith("." + target)}
        return primary.pop() if len(primary) == 1 else None

    def rendered(self, dotted: str) -> Optional[str]:
        if dotted in self.inventory:
            return self.inventory[dotted]
        head, _, name = dotted.rpartition(".")
        owner = import_path(head) if head else None
        obj = import_path(dotted)
        if obj is None and owner is None:
            return None
        path = canonical(obj, owner, name) if owner is not None and inspect.isclass(owner) else None
        path = path or (canonical(obj) if obj is not None else None)
        return self.inventory.get(path) if path else None


def enclosing_classes(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every class in a module."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return spans


def convert_text(text: str, link: Any, plain_only: bool) -> str:
    def replace(match: re.Match[str]) -> str:
        role, tilde, target, parens, plural = match.groups()
        target = re.sub(r"\s+", "", target)
        shown = target.rsplit(".", 1)[-1] if tilde else target
        shown += parens or ""
        shown = f"`{shown}`" + ("s" if plural else "")
        identifier = None if plain_only else link(target)
        if identifier is None:
            if role == "mod" and target.startswith(PACKAGE + "."):  # a module the reference does not render
                shown = f"`{target[len(PACKAGE) + 1:]}`"
            return shown
        return f"[{shown.rstrip('s') if plural else shown}][{identifier}]" + ("s" if plural else "")

    return ROLE.sub(replace, text)


def convert_source(source: str, module: str, resolver: Resolver) -> str:
    classes = enclosing_classes(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.STRING, tokenize.COMMENT) or not ROLE.search(token.string):
            continue
        line = token.start[0]
        inside = [span for span in classes if span[0] <= line <= span[1]]
        owner = max(inside, key=lambda span: span[0])[2] if inside else None
        new = convert_text(
            token.string,
            lambda target: resolver.identifier(target, module, owner),
            plain_only=token.type == tokenize.COMMENT,
        )
        if token.type == tokenize.STRING:
            new = reflow(new, token.start[1], set(token.string.split("\n")))
        start = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1]
        edits.append((start, end, new))
    for start, end, new in reversed(edits):
        source = source[:start] + new + source[end:]
    return source


SECTION = re.compile(
    r"\s*(Args|Arguments|Parameters|Keyword Args|Raises|Returns|Yields|Attributes|Warns|Other Parameters):\s*$"
)


def reflow(text: str, column: int, keep: set[str], width: int = WIDTH) -> str:
    """Split the lines of a string token that the conversion made longer than ``width`` (ruff's line length) at a
    space outside code spans, continuing at the indent a Google-style docstring needs there: an entry of an
    ``Args:`` / ``Raises:`` section continues 4 deeper, a list item 2 deeper, a continuation or a paragraph at its
    own indent."""
    lines = text.split("\n")
    out: list[str] = []
    section_indent: Optional[int] = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        indent_of = len(line) - len(line.lstrip())
        if SECTION.fullmatch(line):
            section_indent = indent_of
        elif stripped and section_indent is not None and indent_of <= section_indent:
            section_indent = None
        start = column if number == 0 else 0
        while line not in keep and start + len(line) > width:
            cut = split_point(line, width - start)
            if cut is None:
                break
            head, line = line[:cut].rstrip(), line[cut:].lstrip()
            out.append(head)
            indent = len(head) - len(head.lstrip())
            if start:  # the first line of the token, which starts at the quotes
                indent = column
            elif section_indent is not None and indent == section_indent + 4:
                indent += 4  # an entry of a Google-style section
            elif re.match(r"\s*([-*]|\d+\.) ", head):
                indent += 2 if head.lstrip()[0] in "-*" else 3
            line = " " * indent + line
            start = 0
        out.append(line)
    return "\n".join(out)


def split_point(line: str, limit: int) -> Optional[int]:
    """The last space before ``limit`` that is outside backticks and after the indent, or None."""
    indent = len(line) - len(line.lstrip())
    ticks = 0
    best = None
    for index, char in enumerate(line[:limit + 1]):
        if char == "`":
            ticks += 1
        elif char == " " and index > indent + 8 and ticks % 2 == 0:
            best = index
    return best


def python_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = (ROOT / name).resolve()
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=[PACKAGE], help="files or folders (default: lightning_spectral)")
    parser.add_argument("--exclude", nargs="*", default=[], help="files or folders to leave alone")
    parser.add_argument("--inventory", type=Path, help="an objects.inv to read instead of building the site")
    parser.add_argument("--check", action="store_true", help="report the files that would change; change nothing")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    excluded = set(python_files(args.exclude))
    files = [path for path in python_files(args.paths) if path not in excluded]
    files = [path for path in files if ROLE.search(path.read_text())]
    if not files:
        print("no Sphinx roles left")
        return 0
    resolver = Resolver(read_inventory(args.inventory) if args.inventory else build_inventory())
    changed = 0
    for path in files:
        source = path.read_text()
        new = convert_source(source, module_name(path), resolver)
        if new == source:
            continue
        changed += 1
        print(("would convert " if args.check else "converted ") + str(path.relative_to(ROOT)))
        if not args.check:
            tmp = path.with_suffix(".py.tmp")
            tmp.write_text(new)
            tmp.replace(path)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
