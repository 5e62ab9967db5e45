"""The library uses torchmetrics' public API only, so its next release cannot silently break sync or checkpoints.

One private method is overridden, pinned here and by its behaviour test: ``Metric._apply`` (a parent's dtype cast,
Lightning's "bf16-true", must move the float64 sums without rounding them; torchmetrics' own guard covers
``.half()`` / ``.float()`` but not ``.to(dtype)``). The lowest and highest torchmetrics and Lightning that
pyproject allows run the metric and callback tests in ``make test``.
"""

import re
from pathlib import Path

import torch
from torchmetrics import Metric

import lightning_spectral
from lightning_spectral.metrics import RFFCovariance

ALLOWED = {"_apply"}  # the one private torchmetrics method this library overrides (see the module doc)


class _Plain(Metric):
    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", default=torch.zeros(()), dist_reduce_fx="sum")

    def update(self, x: torch.Tensor) -> None:
        self.total += x.sum()

    def compute(self) -> torch.Tensor:
        return self.total


def torchmetrics_private_names() -> set[str]:
    """Single-underscore names of torchmetrics' Metric: its methods and a fresh instance's attributes."""
    names = set(dir(Metric)) | set(vars(_Plain()))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_no_private_torchmetrics_name_is_read_written_or_overridden():
    private = torchmetrics_private_names()
    assert {"_defaults", "_is_synced", "_to_sync", "_computed", "_update_count", "_sync_dist"} <= private
    used = {}
    for path in Path(lightning_spectral.__file__).parent.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in re.findall(r"\.(_[A-Za-z]\w*)|def (_[A-Za-z]\w*)\(", line):
                name = name[0] or name[1]
                if name in private and name not in ALLOWED:
                    used.setdefault(name, []).append(f"{path.name}:{number}")
    assert not used, used


def test_the_one_override_keeps_float64_sums_under_a_dtype_cast():
    metric = RFFCovariance(sigma=1.0, n_frequencies=8)
    metric.update(torch.randn(10, 3))
    before = metric.samples.state.clone()
    holder = torch.nn.ModuleDict({"m": metric}).to(torch.bfloat16)  # what Lightning's "bf16-true" does
    assert holder["m"].samples.state.dtype == torch.float64 and torch.equal(holder["m"].samples.state, before)
    assert "_apply" in type(metric).__dict__ or any("_apply" in vars(c) for c in type(metric).__mro__[1:-1])


def test_the_lowest_versions_make_test_runs_are_pyprojects_floors():
    root = Path(lightning_spectral.__file__).parents[1]
    pins = dict(re.findall(r"(torchmetrics|lightning)==([\d.]+)", re.search(r"LOWEST := (.*)", (root / "Makefile").read_text()).group(1)))
    floors = dict(re.findall(r'"(torchmetrics|lightning)>=([\d.]+),<[\d.]+"', (root / "pyproject.toml").read_text()))
    assert set(pins) == set(floors) == {"torchmetrics", "lightning"}
    for package, floor in floors.items():
        assert pins[package].split(".")[:len(floor.split("."))] == floor.split("."), (package, pins[package], floor)
