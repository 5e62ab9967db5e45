"""FINCNovelty and finc against the exact KEN matrix and the identities of the FINC digest (section 9)."""

import pytest
import torch
from sklearn.datasets import load_digits

from lightning_spectral.functional import finc, finc_exact, finc_spectrum, ken_eigenvalues
from lightning_spectral.functional.content_groups import reference_halves
from lightning_spectral.kernels import GaussianRFF, median_bandwidth
from lightning_spectral.metrics import FINCNovelty
from tests.data import mixture_means, sample_mixture, within_mode_factor


def spectrum(gen, ref, rho, n_frequencies=64, sigma=1.5):
    return finc_spectrum(gen, ref, sigma=sigma, n_frequencies=n_frequencies, rho=rho).eigenvalues


def test_trace_range_and_self_comparison_identities():
    x, y = torch.randn(200, 3, dtype=torch.float64), torch.randn(150, 3, dtype=torch.float64) + 0.5
    for rho in (1.0, 2.0, 5.0):
        values = spectrum(x, y, rho)
        assert float(values.sum()) == pytest.approx(1 - rho, abs=1e-10)
        assert float(values.max()) <= 1 + 1e-10 and float(values.min()) >= -rho - 1e-10
    assert float(spectrum(x, x, 1.0).abs().max()) < 1e-12  # X = Y, rho = 1: the zero matrix
    assert float(spectrum(x, x, 3.0).max()) < 1e-12  # X = Y, rho > 1: negative semi-definite, no novel mode
    assert float(finc(x, x, sigma=1.5, n_frequencies=64, rho=3.0)) == 0.0


def test_swapping_sides_at_rho_one_negates_the_spectrum():
    x, y = torch.randn(200, 3, dtype=torch.float64), torch.randn(150, 3, dtype=torch.float64) + 0.5
    torch.testing.assert_close(spectrum(x, y, 1.0), -spectrum(y, x, 1.0).flip(0), atol=1e-12, rtol=0)


def test_covariance_route_equals_the_ken_matrix_on_the_proxy_kernel():
    x, y = torch.randn(60, 3, dtype=torch.float64), torch.randn(40, 3, dtype=torch.float64) + 1.0
    phi_x, phi_y = (GaussianRFF(3, 30, sigma=1.5)(v) for v in (x, y))  # finc_spectrum's default seed 0
    for rho in (1.0, 2.5):
        ken = ken_eigenvalues(phi_x @ phi_x.T, phi_x @ phi_y.T, phi_y @ phi_y.T, rho)
        covariance = spectrum(x, y, rho, n_frequencies=30)
        # the non-zero eigenvalues agree: top positive ones and bottom negative ones
        torch.testing.assert_close(covariance[:5], ken[:5], atol=1e-9, rtol=0)
        torch.testing.assert_close(covariance[-5:], ken[-5:], atol=1e-9, rtol=0)


def test_random_features_converge_to_the_exact_ken_spectrum():
    means = mixture_means(4, d=5, spread=6.0)
    x, _ = sample_mixture(means, 300, weights=[0.4, 0.3, 0.2, 0.1], std=0.5, seed=1)
    y, _ = sample_mixture(means, 300, weights=[0.1, 0.2, 0.3, 0.4], std=0.5, seed=2)
    exact = finc_exact(x, y, sigma=2.0, rho=1.0)

    def mean_error(r):  # l2 error of the top-3 eigenvalues, averaged over 4 frequency draws
        draws = [finc_spectrum(x, y, sigma=2.0, n_frequencies=r, seed=s, rho=1.0).eigenvalues[:3] for s in range(4)]
        return sum(float((values - exact[:3]).norm()) for values in draws) / 4

    coarse, fine = mean_error(25), mean_error(800)
    assert fine < coarse / 4, (coarse, fine)  # ~1/sqrt(r) would give / 5.7
    assert fine < 0.005


def novel_mode_setup(n=3000, seed=0):
    """Digest 7C: 6 shared modes, plus a novel one holding 20 % of the generated mass."""
    means = mixture_means(7, d=10, spread=20.0, seed=seed)
    gen, gen_labels = sample_mixture(means, n, weights=[0.8 / 6] * 6 + [0.2], std=0.3, seed=seed + 1)
    ref, _ = sample_mixture(means, n, weights=[1 / 6] * 6 + [0.0], std=0.3, seed=seed + 2)
    return gen, gen_labels, ref


def test_planted_novel_mode_is_found_alone_and_retrieved_purely():
    gen, labels, ref = novel_mode_setup()
    metric = FINCNovelty(sigma=10.0, n_frequencies=500)
    for batch in gen.split(700):
        metric.update(batch, real=False)
    for batch in ref.split(700):
        metric.update(batch, real=True)
    modes = metric.reading().novel_modes(5)
    assert modes.significant.tolist() == [True, False, False, False, False]
    expected = 0.2 * within_mode_factor(10.0, 0.3, 10)  # ~0.198
    assert float(modes.eigenvalues[0]) == pytest.approx(expected, rel=0.15)
    assert float(metric.compute()) == pytest.approx(float(modes.eigenvalues[0]), rel=1e-12)
    batches = list(zip(gen.split(512), torch.arange(len(gen)).split(512), strict=True))
    (ids, scores), *_ = metric.reading().top_samples(batches, k=1, per_mode=50)
    assert float((labels[ids] == 6).float().mean()) >= 0.95


@pytest.mark.parametrize("rho", [2.0, 3.0])
def test_one_distribution_against_itself_reports_no_novel_mode(rho):
    _, _, ref = novel_mode_setup()
    means = mixture_means(7, d=10, spread=20.0)
    other, _ = sample_mixture(means, 3000, weights=[1 / 6] * 6 + [0.0], std=0.3, seed=99)  # a disjoint draw
    metric = FINCNovelty(sigma=10.0, n_frequencies=500, rho=rho)
    metric.update(other, real=False)
    metric.update(ref, real=True)
    assert float(metric.compute()) == 0.0
    assert not bool(metric.reading().novel_modes(10).significant.any())
    assert not bool(metric.reading().missing_modes(10).significant.any())
    # the naive score, the sum of positive eigenvalues, is not zero: that is why a floor is needed
    assert float(metric.reading().novel_modes(1000).eigenvalues.clamp_min(0).sum()) > 0


def digits_split(seed):
    digits = load_digits()
    x, y = torch.tensor(digits.data / 16.0), torch.tensor(digits.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return x[perm], y[perm]


@pytest.mark.parametrize("seed", [0, 1])
def test_real_digits_planted_novel_class(seed):
    """Real images: digit 9 appears only on the generated side; one distribution against itself finds nothing."""
    x, y = digits_split(seed)
    shared, shared_y = x[y != 9], y[y != 9]
    novel = x[y == 9][:150]
    half = len(shared) // 2
    sigma = median_bandwidth(x) / 2
    gen = torch.cat([shared[half : half + 600], novel])
    gen_labels = torch.cat([shared_y[half : half + 600], torch.full((150,), 9)])
    ref = shared[:half]
    for rho, generated, expect_novel in ((1.0, gen, True), (2.0, gen, True), (2.0, shared[half:], False)):
        metric = FINCNovelty(sigma=sigma, n_frequencies=1024, rho=rho, seed=seed)
        metric.update(generated, real=False)
        metric.update(ref, real=True)
        score = float(metric.compute())
        if not expect_novel:
            assert score == 0.0
            continue
        assert score > 0.02
        modes = metric.reading().novel_modes(3)
        assert bool(modes.significant[0]) and float(modes.p_values[0]) < 0.005
        # the top mode is the novel class; at rho = 2 (a sharper null) a second mode is significant: the novel
        # class's within-class spread, mixed with the classes nearest to it (56-100 % nines measured)
        tops = metric.reading().top_samples([(gen, torch.arange(len(gen)))], k=int(modes.significant.sum()), per_mode=50)
        purities = [float((gen_labels[ids] == 9).float().mean()) for ids, _ in tops]
        assert purities[0] >= 0.95 and min(purities) >= 0.5, purities


def test_frequency_gaps_and_missing_modes():
    means = mixture_means(4, d=10, spread=20.0, seed=4)
    gen, gen_labels = sample_mixture(means, 4000, weights=[0.4, 0.3, 0.15, 0.15], std=0.3, seed=5)
    ref, ref_labels = sample_mixture(means, 4000, weights=[0.1, 0.2, 0.35, 0.35], std=0.3, seed=6)
    factor = within_mode_factor(10.0, 0.3, 10)

    def detected(rho, missing=False):
        metric = FINCNovelty(sigma=10.0, n_frequencies=500, rho=rho)
        metric.update(gen, real=False)
        metric.update(ref, real=True)
        modes = metric.reading().missing_modes(4) if missing else metric.reading().novel_modes(4)
        return modes.eigenvalues[modes.significant], metric

    # mode 0: p/q = 4, mode 1: p/q = 1.5. rho = 1 finds both, gap (p - rho q) x factor
    values, metric = detected(1.0)
    assert values.tolist() == pytest.approx([0.3 * factor, 0.1 * factor], rel=0.2)
    batches = [(gen, torch.arange(len(gen)))]
    first, second = metric.reading().top_samples(batches, k=2, per_mode=30)
    assert set(gen_labels[first[0]].tolist()) == {0} and set(gen_labels[second[0]].tolist()) == {1}
    assert len(detected(2.0)[0]) == 1  # rho = 2 drops mode 1 (ratio 1.5) and keeps mode 0 (ratio 4)
    assert len(detected(5.0)[0]) == 0  # rho = 5 drops both
    # swapping: modes 2 and 3 are under-represented (0.15 vs 0.35); equal gaps span a 2-d eigenspace
    missing, metric = detected(1.0, missing=True)
    assert missing.tolist() == pytest.approx([0.2 * factor] * 2, rel=0.2)
    for ids, _ in metric.reading().top_samples([(ref, torch.arange(len(ref)))], k=2, per_mode=30, missing=True):
        assert set(ref_labels[ids].tolist()) <= {2, 3}


def test_streamed_reference_split_matches_the_functional_split():
    gen, ref = torch.randn(101, 3, dtype=torch.float64), torch.randn(157, 3, dtype=torch.float64)
    metric = FINCNovelty(sigma=1.0, n_frequencies=32, rho=1.0)
    for batch in ref.split(13):  # odd batch sizes: each sample's half depends on its content alone
        metric.update(batch, real=True)
    metric.update(gen, real=False)
    assert float(metric.ref[0].count) == 157
    functional = finc_spectrum(gen, ref, sigma=1.0, n_frequencies=32, rho=1.0)
    assert metric.reading().threshold() == pytest.approx(functional.threshold, rel=1e-10)
    assert float(metric.compute()) == pytest.approx(float(functional.score), rel=1e-10, abs=1e-14)
    torch.testing.assert_close(metric.reading().novel_modes(5).p_values, functional.p_values[:5], rtol=1e-9, atol=1e-12)


def test_threshold_and_score_do_not_depend_on_order_batching_or_striding():
    """The issue's reproduction: ref vs cat(ref[0::2], ref[1::2]) gave thresholds 0.0589 vs 0.0451."""
    means = mixture_means(4, d=6, spread=8.0)
    ref, _ = sample_mixture(means, 1000, std=0.5, seed=3)
    gen, _ = sample_mixture(means, 800, weights=[0.4, 0.3, 0.2, 0.1], std=0.5, seed=4)
    results = []
    for order, batch in ((torch.arange(1000), 1000), (torch.cat([torch.arange(0, 1000, 2), torch.arange(1, 1000, 2)]), 64),
                         (torch.randperm(1000, generator=torch.Generator().manual_seed(0)), 77)):
        metric = FINCNovelty(sigma=3.0, n_frequencies=128)
        for rows in ref[order].split(batch):
            metric.update(rows, real=True)
        metric.update(gen, real=False)
        results.append((metric.reading().threshold(), float(metric.compute()), metric.reading().novel_modes(5).significant.tolist()))
    for threshold, score, significant in results[1:]:
        assert threshold == pytest.approx(results[0][0], rel=1e-9)
        assert score == pytest.approx(results[0][1], rel=1e-9, abs=1e-12)
        assert significant == results[0][2]


def test_reference_kept_across_reset_when_asked():
    gen, ref = torch.randn(100, 3), torch.randn(100, 3)
    keep = FINCNovelty(sigma=1.0, n_frequencies=16, reset_real_features=False)
    drop = FINCNovelty(sigma=1.0, n_frequencies=16)
    for metric in (keep, drop):
        metric.update(ref, real=True)
        metric.update(gen, real=False)
        metric.reset()
        metric.update(gen, real=False)
    assert keep.sample_count(real=True) == 100 and keep.sample_count() == 100
    keep.compute()
    with pytest.raises(RuntimeError, match="no reference samples were accumulated"):
        drop.compute()


def test_calling_a_two_sample_metric_like_a_function_fails_loudly():
    """torchmetrics' forward returns a per-batch value; a two-sample metric has none (the issue: logging it from
    training_step silently logged nothing). It raises and names the right place instead."""
    metric = FINCNovelty(sigma=1.0, n_frequencies=16)
    with pytest.raises(RuntimeError, match="no per-batch value.*update\\(x, real=...\\)"):
        metric(torch.randn(10, 3), real=False)


def test_state_survives_a_checkpoint_round_trip(tmp_path):
    gen, ref = torch.randn(100, 3), torch.randn(100, 3)
    metric = FINCNovelty(sigma=1.0, n_frequencies=16)
    metric.update(ref, real=True)
    torch.save(metric.state_dict(), tmp_path / "finc.pt")
    restored = FINCNovelty(sigma=1.0, n_frequencies=16)
    restored.load_state_dict(torch.load(tmp_path / "finc.pt", weights_only=True))
    for m in (metric, restored):
        m.update(gen, real=False)
    assert float(restored.compute()) == float(metric.compute())
    assert restored.reading().threshold() == metric.reading().threshold()


def test_bad_input_errors_name_the_metric_and_the_fix():
    metric = FINCNovelty(sigma=1.0, n_frequencies=8)
    metric.update(torch.randn(10, 3), real=True)
    with pytest.raises(RuntimeError, match="FINCNovelty: no generated samples"):
        metric.compute()
    with pytest.raises(ValueError, match="FINCNovelty: `features` has width 4 but 3"):
        metric.update(torch.randn(5, 4), real=False)  # both sides share one feature map
    with pytest.raises(ValueError, match="NaN or Inf"):
        metric.update(torch.tensor([[1.0, float("nan"), 0.0]]), real=False)
    with pytest.raises(TypeError, match="`real` must be True"):
        metric.update(torch.randn(5, 3), real="yes")
    other = FINCNovelty(sigma=1.0, n_frequencies=8)
    other.update(torch.randn(10, 3), real=False)
    with pytest.raises(RuntimeError, match="no reference samples were accumulated.*real=True"):
        other.compute()
    with pytest.raises(ValueError, match="rho"):
        FINCNovelty(sigma=1.0, rho=0.0)
    with pytest.warns(UserWarning, match="rho=0.5 < 1"):
        FINCNovelty(sigma=1.0, rho=0.5)
    with pytest.raises(ValueError, match="at least 1 generated and 2 reference"):
        finc(torch.randn(5, 3), torch.randn(1, 3), sigma=1.0)
    with pytest.raises(ValueError, match="width 4 but 3"):
        finc(torch.randn(5, 3), torch.randn(5, 4), sigma=1.0)


def test_float32_and_float64_copies_of_a_reference_give_the_same_halves_threshold_and_score():
    """Issue 19: the half-split hashed the dtype's bytes, so float64 copies moved the threshold by 6 %."""
    means = mixture_means(4, d=5, spread=6.0)
    ref, _ = sample_mixture(means, 900, std=0.5, seed=5)
    gen, _ = sample_mixture(means, 600, weights=[0.5, 0.3, 0.2, 0.0], std=0.5, seed=6)
    ref32 = ref.float()
    assert torch.equal(reference_halves(ref32), reference_halves(ref32.double()))
    assert torch.equal(reference_halves(torch.tensor([[-0.0, 1.0]])), reference_halves(torch.tensor([[0.0, 1.0]])))
    results = []
    for reference in (ref32, ref32.double()):
        metric = FINCNovelty(sigma=2.0, n_frequencies=128)
        metric.update(reference, real=True)
        metric.update(gen.float(), real=False)
        results.append(
            (float(metric.ref[0].count), metric.reading().threshold(), float(metric.compute()), metric.reading().missing_score())
        )
    (count32, threshold32, score32, missing32), (count64, threshold64, score64, missing64) = results
    assert count32 == count64
    assert threshold64 == pytest.approx(threshold32, rel=1e-5)  # float32 features against float64 ones
    assert score64 == pytest.approx(score32, rel=1e-5, abs=1e-7)
    assert float(missing64) == pytest.approx(float(missing32), rel=1e-5, abs=1e-7)
    functional = [finc_spectrum(gen, ref, sigma=2.0, n_frequencies=128).threshold for ref in (ref32, ref32.double())]
    assert functional[1] == pytest.approx(functional[0], rel=1e-5)


def test_values_beyond_float32_range_still_split_in_two():
    x = torch.randn(400, 3, dtype=torch.float64) * 1e300  # their float32 rounding is inf: the float64 words decide
    halves = reference_halves(x)
    assert 120 < int(halves.sum()) < 280


@pytest.mark.parametrize("scale", [1e-300, 1e38, 1e300])
def test_exact_oracle_is_finite_and_scale_equivariant_at_extreme_magnitudes(scale):
    # finc_exact raised LinAlgError on +-1e38..1e300 (NaN kernel matrices): it only depends on x / sigma
    g = torch.Generator().manual_seed(1)
    gen = torch.randn(30, 3, generator=g, dtype=torch.float64)
    ref = torch.randn(40, 3, generator=g, dtype=torch.float64)
    expected = finc_exact(gen, ref, sigma=1.5, rho=2.0)
    torch.testing.assert_close(finc_exact(gen * scale, ref * scale, sigma=1.5 * scale, rho=2.0), expected,
                               rtol=1e-8, atol=1e-10)
    assert bool(torch.isfinite(finc_exact(gen * scale, ref * scale, sigma=1.0)).all())


def test_student_t_survival_matches_scipy():
    from scipy import stats

    from lightning_spectral.functional.student_t import student_t_isf, student_t_sf

    t = torch.linspace(-6, 6, 41, dtype=torch.float64)
    for dof in (1, 2, 3, 6, 7, 14, 30):
        expected = torch.from_numpy(stats.t.sf(t.numpy(), dof))
        torch.testing.assert_close(student_t_sf(t, dof), expected, rtol=0, atol=1e-12)
        assert student_t_isf(0.05, dof) == pytest.approx(float(stats.t.isf(0.05, dof)), abs=1e-9)


@pytest.mark.parametrize("draws", [1, 3])
def test_null_draws_and_p_values_equal_the_dense_oracle(draws):
    """Each draw by the formula of the module doc, built sample by sample and decomposed densely: the generated
    side's draw E_a scaled by c' = beta sqrt(n_gen (1/n_x + 1/n_y)), beta = 1 + (rho - 1) n_x / (n_x + n_y) (at
    rho = 1 the c = sqrt(n_gen (1/n_x + rho^2/n_y)) of the standard errors), for the novel (x = gen) and missing
    (x = ref) spectra."""
    from scipy import stats

    from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers

    g = torch.Generator().manual_seed(7)
    gen = torch.randn(90, 3, generator=g, dtype=torch.float64)
    ref = torch.randn(70, 3, generator=g, dtype=torch.float64) + 0.3
    rff = GaussianRFF(3, 12, sigma=1.5)
    multipliers = Multipliers(draws, 1.5, 0, DEFAULT_RATIO)
    phi = {"gen": rff(gen), "ref": rff(ref)}
    weights = multipliers(gen)  # s_a(x_i) of the generated samples, (90, A)

    def noise(a):  # E_a = (1/n) sum_i (s_a(x_i) - sbar_a) phi_i phi_i^T, generated side
        centred = weights[:, a] - weights[:, a].mean()
        return (phi["gen"] * centred[:, None]).T @ phi["gen"] / 90

    for rho in (1.0, 2.0):
        for missing in (False, True):
            x, y = ("ref", "gen") if missing else ("gen", "ref")
            pair = (ref, gen) if missing else (gen, ref)
            if missing:  # the functional form keeps the draws of its first argument: build the sums directly
                from lightning_spectral.functional.finc import differential_spectrum
                from lightning_spectral.functional.sampling_noise import NoiseSums

                spectrum = differential_spectrum(
                    NoiseSums.of(ref, rff, None), NoiseSums.of(gen, rff, multipliers), rho
                )
            else:
                spectrum = finc_spectrum(*pair, sigma=1.5, n_frequencies=12, rho=rho, noise_draws=draws)
            n = {"gen": 90, "ref": 70}
            beta = 1 + (rho - 1) * n[x] / (n[x] + n[y])
            c = beta * (90 * (1 / n[x] + 1 / n[y])) ** 0.5
            pooled = torch.cat([phi["gen"], phi["ref"]])
            shift = (1 - rho) * pooled.T @ pooled / len(pooled)
            expected = []
            for a in range(draws):
                if rho == 1.0:
                    values = torch.linalg.eigvalsh(c * noise(a))
                    expected += [float(values[-1]), -float(values[0])]
                    continue
                for sign in (1.0, -1.0):
                    expected.append(float(torch.linalg.eigvalsh(shift + sign * c * noise(a))[-1]))
            expected = torch.tensor(expected, dtype=torch.float64)
            torch.testing.assert_close(spectrum.null.draws, expected, rtol=1e-9, atol=1e-12)
            exact = (phi[x].T @ phi[x] / n[x]) - rho * (phi[y].T @ phi[y] / n[y])
            values = torch.linalg.eigvalsh(exact).flip(0)
            torch.testing.assert_close(spectrum.eigenvalues, values, rtol=0, atol=1e-12)
            scale = float(expected.std()) * (1 + 1 / draws) ** 0.5  # nu = A independent draws
            p_values = torch.from_numpy(stats.t.sf(((values - expected.mean()) / scale).numpy(), draws))
            torch.testing.assert_close(spectrum.p_values, p_values, rtol=1e-9, atol=1e-12)
            assert spectrum.significant.tolist() == ((p_values <= 0.05) & (values > 1e-3)).tolist()
            threshold = float(expected.mean()) + scale * stats.t.isf(0.05, draws)
            assert spectrum.threshold == pytest.approx(max(threshold, 1e-3))


def test_the_null_scale_gives_a_draw_the_spread_of_the_relabelling_law_given_the_pooled_moment():
    """On one distribution the split of the pooled samples into the sides is a uniformly random relabelling: given
    the pooled samples (so C_pool) it is the exact law of L = C_x - rho C_y. Identity: L = (1 - rho) C_pool + beta (C_x - C_y). Over 20,000
    relabellings the variance of tr(A L) for a fixed symmetric A is null_scale^2 S^2 / n_gen within 5 % (Monte Carlo
    s.e. 1 %), for the novel (x = gen) and the missing (x = ref) order; S^2 is the per-sample variance of
    phi^T A phi, so S^2 / n_gen is the variance of a draw's tr(A E_a) when the multipliers have variance 1.
    noise_scale^2 S^2 / n_gen is 10-12 % larger at rho = 2 (it counts the noise of C_pool, fixed here, a second
    time); both are equal at rho = 1."""
    from lightning_spectral.functional.finc_null import noise_scale, null_scale
    from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, NoiseSums

    g = torch.Generator().manual_seed(3)
    samples = torch.randn(700, 3, generator=g, dtype=torch.float64)
    rff = GaussianRFF(3, 8, sigma=1.5)
    phi = rff(samples)
    matrix = torch.randn(16, 16, generator=g, dtype=torch.float64)
    t = ((phi @ (matrix + matrix.T)) * phi).sum(1)  # phi_i^T A phi_i
    variance = float(t.var())
    for n_gen, rho in ((400, 2.0), (300, 2.0), (300, 1.0)):
        n_ref = 700 - n_gen
        moments = (phi[:n_gen].T @ phi[:n_gen] / n_gen, phi[n_gen:].T @ phi[n_gen:] / n_ref)
        beta = 1 + (rho - 1) * n_gen / 700
        identity = (1 - rho) * phi.T @ phi / 700 + beta * (moments[0] - moments[1])
        torch.testing.assert_close(moments[0] - rho * moments[1], identity, rtol=0, atol=1e-13)
        orders = torch.rand(20_000, 700, generator=g).argsort(1)  # 20,000 uniformly random relabellings
        gen_mean, ref_mean = t[orders[:, :n_gen]].mean(1), t[orders[:, n_gen:]].mean(1)
        gen = NoiseSums.of(samples[:n_gen], rff, Multipliers(3, 1.5, 0, DEFAULT_RATIO))  # the side with draws
        ref = NoiseSums.of(samples[n_gen:], rff, None)
        for (x, y), law in (((gen, ref), gen_mean - rho * ref_mean), ((ref, gen), ref_mean - rho * gen_mean)):
            conditional = null_scale(gen, x, y, rho) ** 2 * variance / n_gen
            assert float(law.var()) == pytest.approx(conditional, rel=0.05)
            unconditional = noise_scale(gen, x, y, rho) ** 2 * variance / n_gen
            if rho == 1.0:
                assert unconditional == pytest.approx(conditional, rel=1e-12)
            else:
                assert float(law.var()) < 0.96 * unconditional


def test_a_side_of_equal_samples_has_zero_noise_draws():
    """E_a cancels the side's mean: a side collapsed onto one point has no sampling noise."""
    from lightning_spectral.functional.sampling_noise import Multipliers, NoiseSums

    rff = GaussianRFF(4, 16, sigma=1.0)
    side = NoiseSums.of(torch.randn(1, 4, dtype=torch.float64).expand(50, 4), rff, Multipliers(3, 1.0, 0))
    scale = float(side.moment().abs().max())
    for a in range(3):
        assert float(side.draw(a).abs().max()) < 1e-12 * scale


def test_finc_reads_inputs_that_require_grad_as_plain_values():
    """finc is a statistic, not a loss: inputs that require grad (an encoder's output) give the same score as
    their detached values, instead of autograd's 'functions with out=... arguments' error."""
    g = torch.Generator().manual_seed(0)
    generated, reference = torch.randn(200, 3, generator=g), torch.randn(200, 3, generator=g) + 0.5
    expected = finc(generated, reference, 1.0, n_frequencies=64)
    score = finc(generated.clone().requires_grad_(), reference.clone().requires_grad_(), 1.0, n_frequencies=64)
    assert torch.equal(score, expected) and not score.requires_grad


def test_missing_spectrum_at_rho_one_is_the_mirrored_novel_one_and_equals_its_own_decomposition():
    """At rho = 1 the metric reads the missing spectrum off the novel one (C_ref - C_gen = -(C_gen - C_ref)): the
    same eigenvalues, p-values, threshold and (up to sign) eigenvectors as decomposing C_ref - C_gen itself."""
    from lightning_spectral.functional.finc import differential_spectrum

    g = torch.Generator().manual_seed(3)
    gen = torch.randn(120, 3, generator=g, dtype=torch.float64)
    ref = torch.cat([torch.randn(80, 3, generator=g, dtype=torch.float64), torch.randn(40, 3, generator=g) + 4.0])
    metric = FINCNovelty(sigma=1.5, n_frequencies=16, rho=1.0)
    metric.update(gen, real=False)
    metric.update(ref, real=True)
    direct = differential_spectrum(metric.reading()._side(real=True), metric.reading()._side(real=False), 1.0)
    mirrored = metric.reading()._spectrum(missing=True)
    torch.testing.assert_close(mirrored.eigenvalues, direct.eigenvalues, rtol=0, atol=1e-12)
    torch.testing.assert_close(mirrored.p_values, direct.p_values, rtol=1e-9, atol=1e-12)
    assert mirrored.threshold == pytest.approx(direct.threshold, rel=1e-12)
    overlap = (mirrored.eigenvectors[:, :3] * direct.eigenvectors[:, :3]).sum(0).abs()
    torch.testing.assert_close(overlap, torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-9)
    assert float(metric.reading().missing_score()) == pytest.approx(float(direct.score), abs=1e-12)


def test_null_draws_at_rho_two_by_lanczos_are_close_to_the_dense_ones():
    """Above 2r = 1024 with fewer samples than features the rho != 1 null runs Lanczos at a looser residual
    (SHIFTED_RTOL): every draw within 10 % of the dense eigvalsh of the same matrix, never above it (a Ritz value
    is a lower bound), and the threshold within 2 %."""
    from lightning_spectral.functional.finc_null import NullModel, combinations, null_model, null_weights
    from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, NoiseSums

    g = torch.Generator().manual_seed(11)
    gen = torch.randn(300, 4, generator=g, dtype=torch.float64)
    ref = torch.randn(300, 4, generator=g, dtype=torch.float64)
    rff = GaussianRFF(4, 520, sigma=1.0)  # 2r = 1040 > 1024: the Lanczos route
    x, y = NoiseSums.of(gen, rff, Multipliers(3, 1.0, 0, DEFAULT_RATIO)), NoiseSums.of(ref, rff, None)
    null = null_model(x, y, 2.0)
    matrices = combinations(list(x.sums + y.sums), null_weights(x, y, 2.0), torch.float64)
    dense = torch.stack([torch.linalg.eigvalsh(m)[-1] for m in matrices])
    assert bool((null.draws <= dense * (1 + 1e-6) + 1e-12).all())
    torch.testing.assert_close(null.draws, dense, rtol=0.1, atol=0)
    assert null.threshold(0.05) == pytest.approx(NullModel(dense, 3).threshold(0.05), rel=0.02)


def test_modes_and_standard_errors_from_the_top_pairs_equal_the_dense_eigh(monkeypatch):
    """At 2r = 1,024 the modes and the standard errors read the top eigen-pairs found by Lanczos; the same metric
    with the dense ``eigh`` of all 2r pairs (the oracle) gives the same modes, p-values and standard errors."""
    import importlib

    functional_finc = importlib.import_module("lightning_spectral.functional.finc")  # the module, not the function

    x, labels = sample_mixture(mixture_means(5, d=4, spread=3.0), 1200)
    metrics, top_eigh = [], functional_finc.top_eigh
    for dense in (False, True):
        if dense:
            monkeypatch.setattr(functional_finc, "top_eigh", lambda m, k, **kw: top_eigh(m, k, partial=False))
        metric = FINCNovelty(sigma=1.0, n_frequencies=512, rho=1.0)  # the mirrored missing spectrum too
        metric.update(x[:600], real=True)
        metric.update(torch.cat([x[600:1000], x[1000:][labels[1000:] == 0]]), real=False)
        reading = metric.reading()
        errors = [reading.standard_errors(), reading.standard_errors(missing=True)]
        errors += [reading.top_interval(missing=side).se for side in (False, True)]
        metrics.append((reading.novel_modes(3), reading.missing_modes(3), errors, reading.summary()))
    (novel, missing, se, summary), (novel_d, missing_d, se_d, summary_d) = metrics
    for got, want in ((novel, novel_d), (missing, missing_d)):
        torch.testing.assert_close(got.eigenvalues, want.eigenvalues, rtol=1e-9, atol=1e-12)
        assert torch.equal(got.significant, want.significant)
        torch.testing.assert_close((got.eigenvectors * want.eigenvectors).sum(0), torch.ones(3, dtype=torch.float64))
    errors, dense_errors = torch.stack(se), torch.stack(se_d)
    torch.testing.assert_close(errors, dense_errors, rtol=1e-6, atol=1e-12)
    assert summary[""] == summary_d[""] and summary["novel_modes"] == summary_d["novel_modes"]
    assert 1 <= summary["novel_modes"] and summary["missing_modes"] <= 1024 // 16  # so the default route is Lanczos


@pytest.mark.parametrize("rho", [1.0, 2.0])
def test_partial_spectrum_keeps_the_score_modes_and_top_of_the_full_one(rho):
    """From 2r = 1024 the score, the threshold, ``summary`` and the modes read a partial spectrum (the eigenvalues
    above the threshold by Lanczos, certified by a Cholesky factorisation); on a planted novel and a dropped mode
    every value equals the full eigvalsh's to round-off and no decision changes, on both sides."""
    x, labels = sample_mixture(mixture_means(5, d=4, spread=3.0), 1400)
    metric = FINCNovelty(sigma=1.0, n_frequencies=520, rho=rho)  # 2r = 1040: the partial route
    metric.update(x[:600][labels[:600] != 1], real=True)
    metric.update(torch.cat([x[600:1100][labels[600:1100] != 2], x[1100:][labels[1100:] == 1]]), real=False)
    score, missing = metric.compute(), metric.reading().missing_score()
    for side in (False, True):
        partial = metric.reading()._spectrum(side, vectors=False)
        full = metric.reading()._spectrum(side, vectors=False, full=True)
        count = partial.eigenvalues.numel()
        assert count < 1040 // 16 and int(partial.significant.sum()) >= 1  # Lanczos answered; a mode on each side
        torch.testing.assert_close(partial.eigenvalues, full.eigenvalues[:count], rtol=0, atol=1e-12)
        assert torch.equal(partial.significant, full.significant[:count]) and not bool(full.significant[count:].any())
        assert partial.threshold == full.threshold
        assert float((missing if side else score)) == pytest.approx(float(full.score), abs=1e-12)


def test_top_bias_equals_its_bootstrap_formula_and_widens_the_interval_down_to_the_noise_floor():
    """``top_bias`` against its definition (dense eigvalsh of ``L`` and ``L +- c E_a``), by Lanczos at 2r = 1040;
    and on one distribution at rho = 2 (the truth ``lambda_max(-C) <= 0``) the top missing eigenvalue, the largest
    of noisy ones, lies above 0 by more than ``q se``: the symmetric interval misses the truth, the documented
    ``[top - bias - q se, top + q se]`` holds it."""
    from lightning_spectral.functional.finc import top_bias
    from lightning_spectral.functional.finc_null import noise_scale
    from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, NoiseSums
    from lightning_spectral.functional.student_t import student_t_isf

    x, labels = sample_mixture(mixture_means(5, d=4, spread=3.0), 1200)
    rff = GaussianRFF(4, 520, sigma=1.0)  # 2r = 1040: Lanczos
    gen = NoiseSums.of(torch.cat([x[:500], x[1000:][labels[1000:] == 0]]), rff, Multipliers(3, 1.0, 0, DEFAULT_RATIO))
    ref = NoiseSums.of(x[500:1000], rff, None)
    for first, second in ((gen, ref), (ref, gen)):
        matrix = first.moment() - 2.0 * second.moment()
        scale = noise_scale(gen, first, second, 2.0)
        top = float(torch.linalg.eigvalsh(matrix)[-1])
        shifts = [float(torch.linalg.eigvalsh(matrix + s * scale * gen.draw(a))[-1]) - top
                  for a in range(3) for s in (1.0, -1.0)]
        assert float(top_bias(first, second, 2.0)) == pytest.approx(max(sum(shifts) / 6, 0.0), rel=0.02, abs=1e-6)
    metric = FINCNovelty(sigma=1.0, n_frequencies=64, rho=2.0)
    metric.update(x[:600], real=True)
    metric.update(x[600:], real=False)
    interval, q = metric.reading().top_interval(missing=True), student_t_isf(0.025, 3)
    top, se, bias = float(interval.value), float(interval.se), float(interval.bias)
    assert top - q * se > 0 >= top - bias - q * se
    assert (float(interval.low), float(interval.high)) == pytest.approx((top - bias - q * se, top + q * se))
    assert float(metric.reading().top_interval(missing=True, level=0.5).high) < float(interval.high)
