"""Imports only go downward: no module imports from a layer listed after its own in docs/architecture.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lightning_spectral"


def layer_order() -> list[str]:
    """The package's top-level folders and modules in the order of the architecture page's layers table."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("| layer | folder | holds |") :].split("\n\n")[0]
    order = []
    for row in table.splitlines()[2:]:
        for name in re.findall(r"`([\w]+)(?:/|\.py)`", row.split("|")[2]):
            order.append(name)
    return order


def upward_imports(order: list[str]) -> list[str]:
    rank = {name: index for index, name in enumerate(order)}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if own not in rank:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightning_spectral."):
                target = node.module.split(".")[1]
                if target in rank and rank[target] > rank[own]:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}")
    return found


def test_the_layers_table_orders_every_layer():
    order = layer_order()
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders <= set(order), f"layers missing from the table: {sorted(folders - set(order))}"


def test_no_module_imports_from_a_later_layer():
    assert upward_imports(layer_order()) == []


def test_the_check_finds_an_upward_import():
    order = layer_order()
    reversed_order = order[::-1]  # with the table upside down, the package's real imports all run upward
    assert upward_imports(reversed_order)
