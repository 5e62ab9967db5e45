"""FastMMD against the exact MMD and the identities of the FastMMD digest (part D.2)."""

import itertools
import math

import pytest
import torch
from sklearn.datasets import load_digits

from lightning_spectral.functional import fast_mmd, fast_mmd_test, mmd_exact
from lightning_spectral.functional.mmd import (
    _trace_cube_u_statistic,
    asymptotic_p_value,
    null_moments,
    null_trace_cube,
    pearson3_p_value,
    streaming_p_value,
)
from lightning_spectral.kernels import GaussianRFF, gaussian_kernel, median_bandwidth
from lightning_spectral.metrics import FastMMD
from tests.data import blobs


def pair(n=300, m=None, shift=0.0, scale=(1.0, 1.0), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=torch.float64)
    y = torch.randn(m or n, 2, generator=g, dtype=torch.float64) * torch.tensor(scale, dtype=torch.float64) + shift
    return x, y


def test_amplitude_form_equals_mean_embedding_form():
    """Algorithm 1 (squared amplitude of a sum of sinusoids, per frequency) = Algorithm 2 (||z1 - z2||^2)."""
    x, y = pair(120, 80, shift=0.5)
    rff = GaussianRFF(2, 64, sigma=1.0)
    phases_x, phases_y = x @ rff.omega, y @ rff.omega
    phasor = torch.exp(1j * phases_x).mean(0) - torch.exp(1j * phases_y).mean(0)  # sum_i a_i e^{j w x_i}
    amplitude_form = (phasor.abs() ** 2).mean()  # K(0)/L sum_k A_k^2
    torch.testing.assert_close(fast_mmd(x, y, 1.0, 64, unbiased=False), amplitude_form.double())
    # the double-sum form of one frequency: sum_ij a_i a_j cos(theta_i - theta_j)
    a = torch.cat([torch.full((120,), 1 / 120), torch.full((80,), -1 / 80)]).double()
    theta = torch.cat([phases_x[:, 0], phases_y[:, 0]])
    double_sum = (a[:, None] * a[None, :] * torch.cos(theta[:, None] - theta[None, :])).sum()
    torch.testing.assert_close(double_sum, phasor[0].abs() ** 2)


def test_closed_form_correction_is_the_u_statistic_of_the_approximate_kernel():
    x, y = pair(90, 70, shift=0.3)
    rff = GaussianRFF(2, 50, sigma=1.3)
    zx, zy = rff(x), rff(y)
    kxx, kyy, kxy = zx @ zx.T, zy @ zy.T, zx @ zy.T
    m, n = 90, 70
    u_statistic = (
        (kxx.sum() - kxx.diagonal().sum()) / (m * (m - 1))
        + (kyy.sum() - kyy.diagonal().sum()) / (n * (n - 1))
        - 2 * kxy.mean()
    )
    torch.testing.assert_close(fast_mmd(x, y, 1.3, 50, unbiased=True), u_statistic, rtol=1e-10, atol=1e-13)
    # and with the exact kernel the same identity links mmd_exact's two forms
    k = gaussian_kernel(torch.cat([x, y]), sigma=1.3)
    biased = k[:m, :m].mean() + k[m:, m:].mean() - 2 * k[:m, m:].mean()
    torch.testing.assert_close(mmd_exact(x, y, 1.3, unbiased=False), biased)
    mean_x, mean_y = k[:m, :m].mean(), k[m:, m:].mean()
    unbiased = biased + mean_x / (m - 1) + mean_y / (n - 1) - (m + n - 2) / ((m - 1) * (n - 1))
    torch.testing.assert_close(mmd_exact(x, y, 1.3, unbiased=True), unbiased)


def test_converges_to_the_exact_mmd_as_r_grows():
    x, y = pair(1000, scale=(2.0, 0.5), seed=1)  # digest D.2.3 setup
    exact = float(mmd_exact(x, y, sigma=1.0, unbiased=False))

    def mean_error(r):
        return sum(abs(float(fast_mmd(x, y, 1.0, r, seed=s, unbiased=False)) / exact - 1) for s in range(6)) / 6

    errors = {r: mean_error(r) for r in (16, 256, 4096)}
    assert errors[4096] < errors[256] < errors[16], errors
    assert errors[4096] < 0.02


def test_the_square_is_unbiased_over_frequency_draws():
    x, y = pair(150, shift=0.4, seed=2)
    exact_b, exact_u = mmd_exact(x, y, 1.0, unbiased=False), mmd_exact(x, y, 1.0, unbiased=True)
    draws_b = torch.stack([fast_mmd(x, y, 1.0, 16, seed=s, unbiased=False) for s in range(400)])
    draws_u = torch.stack([fast_mmd(x, y, 1.0, 16, seed=s, unbiased=True) for s in range(400)])
    for draws, exact in ((draws_b, exact_b), (draws_u, exact_u)):
        standard_error = float(draws.std()) / math.sqrt(len(draws))
        assert abs(float(draws.mean()) - float(exact)) < 4 * standard_error


def test_invariances_and_limits():
    x, y = pair(200, 150, shift=0.5, seed=3)
    base = fast_mmd(x, y, 1.0, 128)
    torch.testing.assert_close(fast_mmd(x + 5.0, y + 5.0, 1.0, 128), base, rtol=1e-9, atol=1e-12)  # translation
    torch.testing.assert_close(fast_mmd(y, x, 1.0, 128), base)  # symmetry
    assert float(fast_mmd(x, x, 1.0, 128, unbiased=False)) == pytest.approx(0.0, abs=1e-15)
    assert float(fast_mmd(x, y, 1e4, 128, unbiased=False)) < 1e-6  # sigma -> inf
    tiny = float(fast_mmd(x, y, 1e-4, 4096, unbiased=False))  # sigma -> 0: the kernel becomes the identity
    assert tiny == pytest.approx(1 / 200 + 1 / 150, rel=0.05)


def test_metric_matches_functional_with_unequal_sizes_and_bandwidth_family():
    x, y = pair(300, 170, shift=0.2, seed=4)
    metric = FastMMD(sigma=[0.5, 1.0, 2.0], n_frequencies=64, seed=5)
    for batch in x.split(64):
        metric.update(batch, real=True)
    for batch in y.split(50):
        metric.update(batch, real=False)
    values = metric.compute()
    assert values.shape == (3,)
    for index, sigma in enumerate((0.5, 1.0, 2.0)):  # the same standard-normal draws scaled by 1/sigma
        torch.testing.assert_close(values[index], fast_mmd(x, y, sigma, 64, seed=5), rtol=1e-10, atol=1e-13)
    biased = FastMMD(sigma=1.0, n_frequencies=64, seed=5, unbiased=False)
    biased.update(x, real=True)
    biased.update(y, real=False)
    torch.testing.assert_close(biased.compute(), fast_mmd(x, y, 1.0, 64, seed=5, unbiased=False))


def test_null_tail_is_exact_for_equal_eigenvalues():
    # k equal eigenvalues l: T / (1/m + 1/n) = l chi2_k, which the scaled chi-square matches exactly
    m = n = 50
    scale = 1 / m + 1 / n
    for k, value, expected in ((4, 4.0, math.exp(-2.0) * 3.0), (2, 3.0, math.exp(-1.5))):
        trace, trace_sq = torch.tensor(0.5 * k, dtype=torch.float64), torch.tensor(0.25 * k, dtype=torch.float64)
        p = asymptotic_p_value(torch.tensor(0.5 * value * scale, dtype=torch.float64), trace, trace_sq, m, n)
        assert float(p) == pytest.approx(expected, rel=1e-10)


def test_null_moments_are_unbiased_where_the_plug_in_is_not():
    rff = GaussianRFF(2, 32, sigma=1.0)
    population = rff(torch.randn(100_000, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    centred = population - population.mean(0)
    covariance = centred.T @ centred / len(population)
    true_trace, true_trace_sq = float(covariance.trace()), float((covariance @ covariance).trace())
    estimates, plug_ins = [], []
    for draw in range(300):
        z = rff(torch.randn(60, 2, generator=torch.Generator().manual_seed(draw + 1), dtype=torch.float64))
        estimates.append([float(v) for v in null_moments(z.sum(0), z.T @ z, 60)])
        sample_cov = (z - z.mean(0)).T @ (z - z.mean(0)) / 60
        plug_ins.append(float((sample_cov @ sample_cov).trace()))
    mean_trace, mean_trace_sq = (sum(column) / len(estimates) for column in zip(*estimates, strict=True))
    assert mean_trace == pytest.approx(true_trace, rel=0.01)
    assert mean_trace_sq == pytest.approx(true_trace_sq, rel=0.05)
    plug_in = sum(plug_ins) / len(plug_ins)
    assert plug_in - true_trace_sq > 2 * abs(mean_trace_sq - true_trace_sq)  # the plug-in overstates it


def exact_trace_cube(z):
    """The U-statistic of tr S^3 through the centred-Gram identity, every sum taken from the samples themselves."""
    y = z - z.mean(0)
    g = y @ y.T
    d = g.diagonal()
    return _trace_cube_u_statistic(
        len(z), d.sum(), g.square().sum(), (g @ g * g).sum(), d.square().sum(), d @ g @ d,
        (d[:, None] * g.square()).sum(), d.pow(3).sum(), g.pow(3).sum(),
    )


def test_trace_cube_identity_is_the_brute_force_u_statistic():
    """The average of (e1.e2)(e2.e3)(e3.e1)/8, ek = z_a - z_b, over all ordered 6-tuples of distinct samples."""
    g = torch.Generator().manual_seed(0)
    for count in (6, 8):
        z = torch.randn(count, 3, generator=g, dtype=torch.float64)
        z = z / z.norm(dim=1, keepdim=True)
        tuples = torch.tensor(list(itertools.permutations(range(count), 6)))
        e1, e2, e3 = (z[tuples[:, 2 * k]] - z[tuples[:, 2 * k + 1]] for k in range(3))
        brute = ((e1 * e2).sum(1) * (e2 * e3).sum(1) * (e3 * e1).sum(1)).mean() / 8
        torch.testing.assert_close(exact_trace_cube(z), brute, rtol=1e-10, atol=1e-14)


def test_null_trace_cube_is_low_bias_where_the_plug_in_is_not():
    """Resampling a fixed population (its tr S^3 is then exact): the U-statistic is unbiased, the estimator from
    the sums (third-moment terms dropped) is within a few percent of it, the plug-in is 20 % high."""
    rff = GaussianRFF(2, 32, sigma=1.0)
    population = rff(torch.randn(20_000, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    centred = population - population.mean(0)
    covariance = centred.T @ centred / len(population)
    truth = float((covariance @ covariance @ covariance).trace())
    generator = torch.Generator().manual_seed(1)
    estimates, exacts, plug_ins = [], [], []
    for _ in range(400):
        z = population[torch.randint(len(population), (60,), generator=generator)]
        estimates.append(float(null_trace_cube(z.sum(0), z.T @ z, 60)))
        exacts.append(float(exact_trace_cube(z)))
        sample_cov = (z - z.mean(0)).T @ (z - z.mean(0)) / 60
        plug_ins.append(float((sample_cov @ sample_cov @ sample_cov).trace()))
    estimates, exacts, plug_ins = (torch.tensor(v, dtype=torch.float64) for v in (estimates, exacts, plug_ins))
    standard_error = float(exacts.std()) / math.sqrt(len(exacts))
    assert abs(float(exacts.mean()) - truth) < 3 * standard_error
    assert float((estimates - exacts).abs().max()) < 0.06 * truth
    bias = abs(float(estimates.mean()) - truth)
    assert bias < 0.05 * truth
    assert float(plug_ins.mean()) - truth > 4 * bias


def test_pearson3_tail_beats_two_moments_on_a_skewed_spectrum():
    # one large eigenvalue and 20 small ones: the two-moment law has too light a tail
    eigenvalues = torch.tensor([1.0] + [0.05] * 20, dtype=torch.float64)
    chi2 = torch.randn(400_000, 21, generator=torch.Generator().manual_seed(0), dtype=torch.float64).square()
    draws = chi2 @ eigenvalues
    threshold = float(torch.quantile(draws[:100_000], 0.99))
    truth = float((draws > threshold).double().mean())
    traces = [eigenvalues.pow(k).sum() for k in (1, 2, 3)]
    value = torch.tensor(threshold, dtype=torch.float64)
    three = float(pearson3_p_value(value, *traces))
    two = float(asymptotic_p_value(value, traces[0], traces[1], 1.0, math.inf))  # 1/m + 1/n = 1
    assert two < 0.75 * truth  # liberal
    assert abs(three - truth) < 0.1 * truth
    # equal eigenvalues: the clipped third moment gives back the exact scaled chi-square
    k, level = 4, torch.tensor(0.5 * 4.0, dtype=torch.float64)
    equal = [torch.tensor(0.5**j * k, dtype=torch.float64) for j in (1, 2, 3)]
    assert float(pearson3_p_value(level, *equal)) == pytest.approx(math.exp(-2.0) * 3.0, rel=1e-10)


def test_streaming_p_value_degenerate_bandwidths_and_errors():
    same = torch.nn.functional.normalize(torch.ones(1, 6, dtype=torch.float64), dim=1).expand(10, 6)
    feature_sum, cov_sum = same.sum(0), same.T @ same
    zero, positive = torch.tensor(0.0, dtype=torch.float64), torch.tensor(1e-3, dtype=torch.float64)
    assert float(streaming_p_value(zero, feature_sum, cov_sum, 10, 5, 5)) == 1.0  # S = 0: T is 0 under H0
    assert float(streaming_p_value(positive, feature_sum, cov_sum, 10, 5, 5)) == 0.0
    # leading bandwidth dimension: one p-value per bandwidth, each as if computed alone
    x, y = pair(120, 90, shift=0.3, seed=8)
    sums, covs, statistics = [], [], []
    for sigma in (0.5, 2.0):
        rff = GaussianRFF(2, 16, sigma, seed=3)
        z_x, z_y = rff(x), rff(y)
        z = torch.cat([z_x, z_y])
        sums.append(z.sum(0))
        covs.append(z.T @ z)
        statistics.append((z_x.mean(0) - z_y.mean(0)).square().sum())
    batched = streaming_p_value(torch.stack(statistics), torch.stack(sums), torch.stack(covs), 210, 120, 90)
    assert batched.shape == (2,)
    for index in range(2):
        alone = streaming_p_value(statistics[index], sums[index], covs[index], 210, 120, 90)
        torch.testing.assert_close(batched[index], alone)
    with pytest.raises(ValueError, match="`cov_sum` must have shape"):
        streaming_p_value(statistics[0], sums[0], covs[0][:-1], 210, 120, 90)
    with pytest.raises(ValueError, match="`statistic` must have one value"):
        streaming_p_value(torch.stack(statistics), sums[0], covs[0], 210, 120, 90)
    with pytest.raises(ValueError, match="`count` \\(200\\) must be m \\+ n \\(210\\)"):
        streaming_p_value(statistics[0], sums[0], covs[0], 200, 120, 90)
    with pytest.raises(ValueError, match="at least one sample on each side"):
        streaming_p_value(statistics[0], sums[0], covs[0], 210, 210, 0)
    with pytest.raises(ValueError, match="at least 6 samples"):
        streaming_p_value(statistics[0], sums[0], covs[0], 5, 3, 2)


def test_metric_test_is_the_functional_streaming_p_value():
    x, y = pair(200, 150, shift=0.1, seed=9)
    metric = FastMMD(sigma=[0.7, 1.4], n_frequencies=32, seed=4)
    for batch in x.split(70):
        metric.update(batch, real=True)
    metric.update(y, real=False)
    result = metric.reading().test(level=0.05)
    for index, sigma in enumerate((0.7, 1.4)):
        rff = GaussianRFF(2, 32, sigma, seed=4)
        z_x, z_y = rff(x).double(), rff(y).double()
        z = torch.cat([z_x, z_y])
        statistic = (z_x.mean(0) - z_y.mean(0)).square().sum()
        expected = streaming_p_value(statistic, z.sum(0), z.T @ z, 350, 200, 150)
        torch.testing.assert_close(result.p_value[index], expected, rtol=1e-6, atol=1e-9)


@pytest.mark.slow
def test_streaming_p_value_is_calibrated_in_the_tail_on_digit_images():
    """20,000 random halves of 1600 real digit images (r = 64): the rejection rate at level 0.01 and 0.05
    stays within 3 binomial standard errors of nominal; the two-moment rule is liberal here (about 0.015)."""
    images = torch.tensor(load_digits().data / 16.0, dtype=torch.float64)
    sigma = median_bandwidth(images[:197])  # bandwidth from images the test does not use
    z = GaussianRFF(64, 64, sigma, seed=0)(images[197:]).double()
    count, m = z.shape[0], z.shape[0] // 2
    feature_sum, cov_sum = z.sum(0), z.T @ z
    trace, trace_sq = null_moments(feature_sum, cov_sum, count)
    trace_cube = null_trace_cube(feature_sum, cov_sum, count)
    generator, statistics = torch.Generator().manual_seed(0), []
    for _ in range(20):
        order = torch.argsort(torch.rand(1000, count, generator=generator), dim=1)
        weights = torch.where(order < m, 1.0 / m, -1.0 / (count - m)).double().T
        statistics.append((z.T @ weights).square().sum(0))
    statistics = torch.cat(statistics)
    trials = len(statistics)
    new = pearson3_p_value(statistics / (1 / m + 1 / (count - m)), trace, trace_sq, trace_cube)
    old = asymptotic_p_value(statistics, trace, trace_sq, m, count - m)
    for level in (0.01, 0.05):
        standard_error = math.sqrt(level * (1 - level) / trials)
        rate = float((new <= level).double().mean())
        assert abs(rate - level) <= 3 * standard_error, (level, rate)
    assert float((old <= 0.01).double().mean()) > 0.01 + 3 * math.sqrt(0.01 * 0.99 / trials)


def test_streaming_test_is_calibrated_and_has_power():
    """300 null trials at level 0.05 (digest D.2.7): rejection rate within [0.02, 0.08], p-values ~ uniform."""
    p_values = []
    for trial in range(300):
        x, y = pair(150, seed=100 + trial)
        metric = FastMMD(sigma=1.0, n_frequencies=32, seed=trial)
        metric.update(x, real=True)
        metric.update(y, real=False)
        p_values.append(float(metric.reading().p_value()))
    p_values = torch.tensor(p_values)
    assert 0.02 <= float((p_values <= 0.05).double().mean()) <= 0.08
    assert 0.4 <= float((p_values <= 0.5).double().mean()) <= 0.6
    rejections = 0
    for trial in range(20):
        x, y = pair(150, scale=(1.5, 1.0), seed=900 + trial)
        metric = FastMMD(sigma=1.0, n_frequencies=64, seed=trial)
        metric.update(x, real=True)
        metric.update(y, real=False)
        rejections += bool(metric.reading().test(level=0.05).reject)
    assert rejections >= 12


def test_permutation_test_is_valid_and_agrees_with_the_streaming_test():
    x, y = blobs(200, 1.0, seed=1), blobs(200, 4.0, seed=2)
    result = fast_mmd_test(x, y, sigma=1.0, n_frequencies=256, n_permutations=400)
    assert bool(result.reject) and 1 / 401 <= float(result.p_value) < 0.01  # p >= 1/(B+1) by construction
    null = fast_mmd_test(x, blobs(200, 1.0, seed=3), sigma=1.0, n_frequencies=256, n_permutations=400)
    assert not bool(null.reject) and float(null.p_value) > 0.05
    metric = FastMMD(sigma=1.0, n_frequencies=256)
    metric.update(x, real=True)
    metric.update(y, real=False)
    torch.testing.assert_close(metric.reading().test().statistic, result.statistic, rtol=1e-6, atol=1e-9)
    assert bool(metric.reading().test().reject)


def test_reference_kept_across_reset_and_state_round_trip(tmp_path):
    x, y = pair(100, shift=1.0, seed=6)
    metric = FastMMD(sigma=1.0, n_frequencies=32, reset_real_features=False)
    metric.update(x, real=True)
    metric.update(y, real=False)
    before = metric.compute()
    metric.reset()
    assert metric.sample_count(real=True) == 100 and metric.sample_count() == 0
    torch.save(metric.state_dict(), tmp_path / "mmd.pt")
    restored = FastMMD(sigma=1.0, n_frequencies=32, reset_real_features=False)
    restored.load_state_dict(torch.load(tmp_path / "mmd.pt", weights_only=True))
    restored.update(y, real=False)
    torch.testing.assert_close(restored.compute(), before)


def test_bad_input_raises_clear_errors():
    metric = FastMMD(sigma=1.0, n_frequencies=8)
    metric.update(torch.randn(5, 3), real=True)
    with pytest.raises(RuntimeError, match="generated \\(real=False\\) side is empty"):
        metric.compute()
    with pytest.raises(ValueError, match="FastMMD: `features` has width 4 but 3"):
        metric.update(torch.randn(5, 4), real=False)
    with pytest.raises(ValueError, match="NaN or Inf"):
        metric.update(torch.tensor([[0.0, float("inf"), 1.0]]), real=False)
    with pytest.raises(TypeError, match="`real` must be True"):
        metric.update(torch.randn(5, 3), real=1)
    for bad in (0.0, -1.0, [1.0, 0.0], []):
        with pytest.raises(ValueError, match="sigma"):
            FastMMD(sigma=bad)
    with pytest.raises(ValueError, match="non-empty"):
        fast_mmd(torch.randn(0, 2), torch.randn(3, 2), sigma=1.0)
    with pytest.raises(ValueError, match="width 3 but 2"):
        fast_mmd(torch.randn(4, 2), torch.randn(3, 3), sigma=1.0)
    with pytest.raises(ValueError, match="at least 2 samples"):
        fast_mmd(torch.randn(1, 2), torch.randn(3, 2), sigma=1.0)


def test_calling_like_a_function_raises_and_names_the_right_place():
    x, y = pair(100, shift=1.0, seed=7)
    metric = FastMMD(sigma=1.0, n_frequencies=32, reset_real_features=False)
    with pytest.raises(RuntimeError, match="no per-batch value"):
        metric(x, real=True)
    metric.update(x, real=True)
    metric.update(y, real=False)
    torch.testing.assert_close(metric.compute(), fast_mmd(x, y, 1.0, 32))


@pytest.mark.parametrize("sigma", [1.5, [1.0, 2.0, 4.0]])
def test_statistic_only_keeps_means_only_and_gives_the_same_mmd(sigma):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 5, generator=g), torch.randn(250, 5, generator=g) + 0.3
    full = FastMMD(sigma, n_frequencies=64, seed=3)
    light = FastMMD(sigma, n_frequencies=64, seed=3, statistic_only=True)
    for metric in (full, light):
        for part in x.split(64):
            metric.update(part, real=True)
        for part in y.split(37):
            metric.update(part, real=False)
    value = light.compute()
    assert value.shape == (() if isinstance(sigma, float) else (3,))
    torch.testing.assert_close(value, full.compute(), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(value, fast_mmd(x, y, sigma, 64, seed=3).to(value), rtol=1e-6, atol=1e-9)
    assert float(value.min()) > 1e-3  # the sides differ: the comparison is not between two zeros
    sums = light.state_dict()["_extra_state"]["sums"]
    assert max(t.numel() for t in sums.values()) <= 1 + 2 * 64 * (1 if isinstance(sigma, float) else 3)  # no (2r)^2
    with pytest.raises(RuntimeError, match="statistic_only=True"):
        light.reading().p_value()


@pytest.mark.parametrize("scale", [1e-300, 1e38, 1e300])
def test_exact_mmd_and_its_test_are_finite_and_scale_equivariant_at_extreme_magnitudes(scale):
    # At 1e300 the expanded squared distances overflowed (inf - inf): a NaN statistic with reject=True. The exact
    # oracle only depends on x / sigma, so scaling data and sigma together must give the unit-scale answer.
    from lightning_spectral.functional import mmd_exact_test

    x, y = pair(40, 30, shift=0.7, seed=3)
    for unbiased in (True, False):
        expected = mmd_exact(x, y, 1.0, unbiased=unbiased)
        got = mmd_exact(x * scale, y * scale, scale, unbiased=unbiased)
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    unit = mmd_exact_test(x, y, 1.0, n_permutations=99, seed=1)
    scaled = mmd_exact_test(x * scale, y * scale, scale, n_permutations=99, seed=1)
    torch.testing.assert_close(scaled.statistic, unit.statistic, rtol=1e-9, atol=1e-12)
    assert float(scaled.p_value) == float(unit.p_value) and bool(scaled.reject) == bool(unit.reject)
    # sigma far below the spread: every cross kernel value is 0, the statistic is finite (1/m + 1/n, biased)
    far = mmd_exact_test(x * scale, y * scale, 1.0, n_permutations=99) if scale > 1 else None
    if far is not None:
        assert math.isfinite(float(far.statistic))
        assert float(far.statistic) == pytest.approx(1 / 40 + 1 / 30, rel=1e-12)


def test_log_p_values_continue_below_float64_where_the_p_value_reads_zero():
    """``log_gamma_upper`` is ``log(gammaincc)`` where that is representable and the continued fraction below it
    (checked against the asymptotic series); FastMMD's ``minus_log10_p`` is ``-log10 p`` where p is a float64 number
    and finite, above 307.65, where the p-value underflows to 0 (the headline no longer stops at a cap)."""
    from lightning_spectral.functional.mmd import log_gamma_upper

    f64 = dict(dtype=torch.float64)
    a = torch.tensor([0.5, 2.0, 7.5, 40.0], **f64)[:, None]
    x = torch.tensor([0.1, 3.0, 30.0, 300.0, 650.0], **f64)[None, :]
    direct = torch.special.gammaincc(a, x)
    got = log_gamma_upper(a, x)
    shown = direct > 1e-300
    torch.testing.assert_close(got[shown], direct[shown].log(), rtol=1e-9, atol=1e-12)
    far = torch.tensor([900.0, 2000.0, 1e5], **f64)
    for order in (0.5, 3.0, 40.0):
        terms = [1.0]  # the asymptotic series of Q(a, x) e^x x^(1-a) Gamma(a): 1 + (a-1)/x + (a-1)(a-2)/x^2 + ...
        for k in range(1, 12):
            terms.append(terms[-1] * (order - k) / far)
        series = (order - 1) * far.log() - far - math.lgamma(order) + torch.log(sum(terms))
        assert torch.special.gammaincc(torch.tensor(order, **f64), far[0]) == 0  # float64 gives 0 here
        torch.testing.assert_close(log_gamma_upper(torch.tensor(order, **f64), far), series, rtol=1e-8, atol=0)
    g = torch.Generator().manual_seed(0)
    near, distant = FastMMD(sigma=1.0, n_frequencies=128), FastMMD(sigma=4.0, n_frequencies=128)
    for metric, shift in ((near, 0.3), (distant, 6.0)):
        metric.update(torch.randn(3000, 4, generator=g), real=True)
        metric.update(torch.randn(3000, 4, generator=g) + shift, real=False)
    summary = near.reading().summary()
    assert float(summary["minus_log10_p"]) == pytest.approx(-math.log10(float(summary["p_value"])), rel=1e-9)
    reading = distant.reading()
    assert float(reading.summary()["p_value"]) == 0.0  # below 1e-308
    logged = float(reading.headline()["minus_log10_p"])
    assert math.isfinite(logged) and logged > 320
