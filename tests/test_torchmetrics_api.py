"""The library uses torchmetrics' public API only, so its next release cannot silently break sync or checkpoints.

One private method is overridden, pinned here and by its behaviour test: ``Metric._apply`` (a parent's dtype cast,
Lightning's "bf16-true", must move the float64 sums without rounding them; torchmetrics' own guard covers
``.half()`` / ``.float()`` but not ``.to(dtype)``). The lowest and highest torchmetrics and Lightning that
pyproject allows run the metric and callback tests in ``make test``.
"""

import importlib.util
import re
from pathlib import Path

import pytest
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


def held_bytes(metric: Metric) -> int:
    """Bytes of every tensor storage reachable from ``metric`` (its states, whatever torchmetrics keeps for ``reset``,
    its map's frequencies), each storage once: the measure of ``benchmarks/bench_state_memory.py``, loaded from it."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_state_memory.py"
    spec = importlib.util.spec_from_file_location("bench_state_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.held_bytes(metric)


def test_each_sum_is_held_once_after_update_and_reset():
    from lightning_spectral.metrics import FINCNovelty, FKEAVendi

    for metric in (FKEAVendi(sigma=1.0, n_frequencies=256), FINCNovelty(sigma=1.0, n_frequencies=256)):
        x = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
        metric.update(x, **({"real": True} if isinstance(metric, FINCNovelty) else {}))
        if isinstance(metric, FINCNovelty):
            metric.update(x + 1, real=False)
        sums = sum(state.numel() * 8 for state in metric.metric_state.values() if isinstance(state, torch.Tensor))
        assert sums > 3 * 512 * 512 * 8  # several (2r)^2 float64 sums
        assert held_bytes(metric) < 1.05 * sums, type(metric).__name__  # not sums plus full-size defaults
        metric.reset()
        assert held_bytes(metric) < 1.05 * sums
        metric.update(x, **({"real": False} if isinstance(metric, FINCNovelty) else {}))  # the sums are full size again
        assert sum(state.numel() * 8 for state in metric.metric_state.values() if isinstance(state, torch.Tensor)) == sums


def test_merge_state_reads_as_one_metric_fed_everything():
    """Two metrics fed uneven halves (one with rows still pending), merged, give the numbers of one fed all."""
    from lightning_spectral.metrics import Covariance, FastMMD, FINCNovelty, FKEAVendi
    from lightning_spectral.kernels import GaussianRFF

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(300, 3, generator=g).double(), torch.randn(200, 3, generator=g).double() + 0.5
    builders = {
        "fkea": lambda: FKEAVendi(sigma=1.0, n_frequencies=64, alpha=[1, 2], chunk_size=64),
        "finc": lambda: FINCNovelty(sigma=1.0, n_frequencies=64, chunk_size=64),
        "mmd": lambda: FastMMD(sigma=[0.5, 1.0], n_frequencies=64, chunk_size=64),
        "centred": lambda: Covariance(GaussianRFF(None, 32, 1.0, 0), centre=True, chunk_size=64),
    }
    for name, build in builders.items():
        whole, first, second = build(), build(), build()
        two = name in ("finc", "mmd")
        for metric, rows in ((whole, slice(None)), (first, slice(0, 170)), (second, slice(170, None))):
            if two:
                metric.update(x[rows], real=True)
                metric.update(y[rows], real=False)
            else:
                metric.update(x[rows])
        first.merge_state(second)
        for state, value in whole.metric_state.items():
            if isinstance(value, torch.Tensor):
                assert torch.allclose(first.metric_state[state], value, rtol=1e-12, atol=1e-12), (name, state)
        if name != "centred":
            assert str(first.reading().summary()) == str(whole.reading().summary()) or all(
                torch.allclose(torch.as_tensor(a), torch.as_tensor(b), rtol=1e-9)
                for a, b in zip(_leaves(first.reading().summary()), _leaves(whole.reading().summary()))
            ), name


def test_merge_state_refuses_another_build_and_changes_nothing():
    from lightning_spectral.metrics import FKEAVendi

    one, other = FKEAVendi(sigma=1.0, n_frequencies=32), FKEAVendi(sigma=1.0, n_frequencies=32, seed=1)
    one.update(torch.randn(20, 2))
    other.update(torch.randn(20, 2))
    before = {k: v.clone() for k, v in one.metric_state.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(ValueError, match="merge_state.*frequencies"):
        one.merge_state(other)
    with pytest.raises(ValueError, match="merge_state.*another FKEAVendi"):
        one.merge_state({"samples_sums": torch.zeros(3)})
    assert all(torch.equal(one.metric_state[k], v) for k, v in before.items())


def _leaves(value):
    """The tensors of a (nested) summary, in order."""
    if isinstance(value, dict):
        for key in value:
            yield from _leaves(value[key])
    else:
        yield value


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # as torchmetrics: a merge is no update
def test_merge_state_into_a_fresh_metric():
    from lightning_spectral.metrics import FINCNovelty

    fed, fresh, whole = (FINCNovelty(sigma=1.0, n_frequencies=32) for _ in range(3))
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(2)).double()
    for metric in (fed, whole):
        metric.update(x, real=True)
        metric.update(x[:25] + 1, real=False)
    fresh.merge_state(fed)
    assert torch.equal(fresh.compute(), whole.compute())
    other = FINCNovelty(sigma=1.0, n_frequencies=32, seed=3)
    with pytest.raises(ValueError, match="frequencies"):
        other.merge_state(fed)
    assert other.in_features is None  # the refused merge left it unbuilt
