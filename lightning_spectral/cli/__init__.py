"""The ``lightning-spectral`` command line: ``evaluate`` (FKEA Vendi / RKE, FINC, FastMMD), ``compare`` (SPEC) and
``ood`` (kernel PCA) on embedding files streamed from disk, or on folders of images embedded first, as one process
or under ``torchrun``.

Run ``lightning-spectral --help`` (installed with the package) or ``python -m lightning_spectral.cli --help``.
Modules: :mod:`~lightning_spectral.cli.app` (parser, :func:`main`, errors), :mod:`~lightning_spectral.cli.reader`
(chunked, memory-mapped embedding files), :mod:`~lightning_spectral.cli.runtime` (process group, JSON),
:mod:`~lightning_spectral.cli.pictures`, :mod:`~lightning_spectral.cli.images` (image folders and lists in), and one
module per subcommand.
"""

from lightning_spectral.cli.app import main

__all__ = ["main"]
