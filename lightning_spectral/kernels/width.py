"""How many random frequencies a data set of known size needs: a width that fits the data."""

from __future__ import annotations

import math

from lightning_spectral._checks import check_positive_int

#: The widest default map: r = 2048 frequencies, 2r = 4096 features, a (2r)^2 float64 state of 134 MB.
MAX_FREQUENCIES = 2048
#: The narrowest: below 2r = 128 the random-feature error of a single kernel value exceeds ~10 %.
MIN_FREQUENCIES = 64


def frequencies_for(n_samples: int, cap: int = MAX_FREQUENCIES, minimum: int = MIN_FREQUENCIES) -> int:
    r"""The number of frequencies ``r`` (``2r`` features) for covariances of at most ``n_samples`` rows each:
    ``r = min(cap, max(minimum, ceil(n_samples / 2)))``, so ``2r >= n_samples`` up to the cap.

    A covariance $C = \frac{1}{n} \sum_i \phi(x_i) \phi(x_i)^\top$ of $n$ rows has rank at most $n$: its
    non-zero eigenvalues are those of the $n \times n$ random-feature Gram matrix. Once $2r$ reaches that rank,
    more features add no eigenvalues to it, only cost ($n (2r)^2$ to accumulate, $(2r)^3$ per eigendecomposition);
    the scores then move by the random-feature error of the draw (on 1,000 + 1,000 digit images, Vendi-1 and RKE
    at $2r$ = 1,000 lie within 3 % of those at 4,096, one seed-to-seed standard deviation, with the same
    significant FINC modes: Benchmarks page, "A width that fits the data"). The width must be fixed before the
    first update (every rank sums the same $(2r)^2$ entries), so it is decided from a size known up front (the
    command line counts the rows of its files); a metric on a stream keeps the ``n_frequencies`` it is given.

    Args:
        n_samples: the rows of the largest covariance (all ranks together; FINC and FastMMD: the larger side).
        cap: the largest ``r`` returned (default 2048, the metrics' default).
        minimum: the smallest ``r`` returned (default 64).

    Examples:
        >>> frequencies_for(400), frequencies_for(2000), frequencies_for(1_000_000), frequencies_for(10)
        (200, 1000, 2048, 64)
    """
    check_positive_int(n_samples, "n_samples")
    check_positive_int(cap, "cap")
    check_positive_int(minimum, "minimum")
    return min(cap, max(minimum, math.ceil(n_samples / 2)))
