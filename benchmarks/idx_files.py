"""The IDX reader the benchmarks share (Fashion-MNIST's ``*-ubyte.gz`` files; LeCun et al.'s MNIST format), runnable
to check a folder of them:

    python benchmarks/idx_files.py                                   # Debian's dataset-fashion-mnist
    python benchmarks/idx_files.py --folder /path/to/fashion-mnist

The data is never shipped with the library: Debian's ``dataset-fashion-mnist`` package installs it in
/usr/share/datasets/fashion-mnist.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def read_idx(path: Path) -> np.ndarray:
    """A gzipped IDX file as a uint8 array: a 4-byte magic whose last byte is the number of dimensions, one
    big-endian 4-byte size per dimension, then the bytes."""
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=FASHION)
    folder = Path(parser.parse_args().folder)
    files = sorted(folder.glob("*-ubyte.gz"))
    if not files:
        print(f"no *-ubyte.gz files in {folder} (apt-get install dataset-fashion-mnist)")
        return
    for path in files:
        array = read_idx(path)
        counts = np.bincount(array).tolist() if array.ndim == 1 else None
        print(f"{path.name}: {array.shape}" + (f", per class {counts}" if counts else ""))


if __name__ == "__main__":
    main()
