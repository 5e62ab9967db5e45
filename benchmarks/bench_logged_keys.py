"""What a GAN run logs, and how large each metric's own surface is.

    python benchmarks/bench_logged_keys.py

Runs the five-minute page's example as a user does (``docs/examples/generative_quickstart.py``: a small GAN on
scikit-learn's 8x8 digits, two epochs, ``GeneratedSamples`` with FKEAVendi (orders 1 and 2), FINCNovelty and FastMMD
at their defaults, Lightning's ``CSVLogger``), in a scratch folder. Printed: the scalar columns of its
``metrics.csv`` (all, and those the callback wrote), each callback column whose value never changed over the epochs
(a constant logged as a scalar), and the public names each metric class adds to ``torchmetrics.Metric``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import runpy
import tempfile
import warnings
from pathlib import Path

from torchmetrics import Metric

from lightning_spectral.metrics import ConditionalVendi, FastMMD, FINCNovelty, FKEAVendi, SPECDivergence

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "generative_quickstart.py"


def logged_rows() -> list[dict[str, str]]:
    """The rows of the example run's ``metrics.csv``."""
    with tempfile.TemporaryDirectory() as folder:
        here = os.getcwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runpy.run_path(str(EXAMPLE), run_name="__main__")
            (path,) = Path(folder).rglob("metrics.csv")
            with open(path, newline="") as handle:
                return list(csv.DictReader(handle))
        finally:
            os.chdir(here)


def public_names(cls: type) -> list[str]:
    """Public attributes a metric class adds to ``torchmetrics.Metric`` (its own and its bases' in this library)."""
    return sorted(name for name in dir(cls) if not name.startswith("_") and not hasattr(Metric, name))


def main() -> None:
    rows = logged_rows()
    columns = list(rows[0]) if rows else []
    scalars = [c for c in columns if c not in ("epoch", "step")]
    ours = [c for c in scalars if c.startswith("gen/")]
    constant = [c for c in ours if len({row[c] for row in rows if row[c] != ""}) == 1]
    epochs = len({row["epoch"] for row in rows})
    print(f"metrics.csv: {len(scalars)} scalar columns ({len(ours)} from GeneratedSamples) over {epochs} epochs")
    print("callback columns: " + ", ".join(ours))
    print(f"constant over the epochs ({len(constant)}): " + ", ".join(constant))
    for cls in (FKEAVendi, FINCNovelty, FastMMD, SPECDivergence, ConditionalVendi):
        names = public_names(cls)
        print(f"{cls.__name__}: {len(names)} public names beyond torchmetrics' Metric: {', '.join(names)}")


if __name__ == "__main__":
    main()
