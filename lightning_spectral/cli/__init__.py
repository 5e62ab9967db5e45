"""The ``lightning-spectral`` command line: ``evaluate`` (FKEA Vendi / RKE, FINC, FastMMD), ``compare`` (SPEC) and
``ood`` (kernel PCA) on embedding files streamed from disk, or on folders of images embedded first, as one process
or under ``torchrun``.

Run ``lightning-spectral --help`` (installed with the package) or ``python -m lightning_spectral.cli --help``.
Modules: `cli.app` (parser, [`main`][lightning_spectral.cli.main], errors), [`reader`][lightning_spectral.cli.reader]
(chunked, memory-mapped embedding files), `cli.runtime` (process group, JSON),
`cli.pictures`, `cli.images` (image folders and lists in), and one
module per subcommand.
"""

from lightning_spectral.cli.app import main

__all__ = ["main"]
