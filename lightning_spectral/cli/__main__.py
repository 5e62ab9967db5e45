"""``python -m lightning_spectral.cli``: the same as the ``lightning-spectral`` command."""

import sys

from lightning_spectral.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
