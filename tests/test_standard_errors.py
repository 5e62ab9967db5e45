"""Standard errors of the scores: FKEAVendi's from the multiplier draws (first order, against autograd through the
n x n oracle's draws), FastMMD's in closed form (against the explicit features); both against the spread of the
scores over fresh samples, and through a checkpoint."""

import math

import pytest
import torch

from lightning_spectral.functional.fkea import (
    gradient_replicates,
    vendi_from_spectrum,
    vendi_gradient,
    vendi_standard_errors,
)
from lightning_spectral.functional.sampling_noise import DEFAULT_RATIO, Multipliers, draws_exact
from lightning_spectral.kernels import GaussianRFF
from lightning_spectral.metrics import FastMMD, FKEAVendi
from tests.data import mixture_means, sample_mixture


def mixture(n, seed):
    means = mixture_means(4, d=3, spread=3.0, seed=7)
    x, _ = sample_mixture(means, n, weights=[0.4, 0.3, 0.2, 0.1], std=0.8, seed=seed)
    return x


@pytest.mark.parametrize("alpha", [0.5, 1, 2, 3, "inf"])
@pytest.mark.parametrize("truncation", [None, 3])
def test_vendi_gradient_equals_autograd(alpha, truncation):
    values = torch.rand(10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    values = torch.sort(values, descending=True).values
    values[-2:] = 0.0  # zero eigenvalues contribute nothing
    leaf = values.clone().requires_grad_(True)
    vendi_from_spectrum(leaf, alpha, truncation).backward()
    torch.testing.assert_close(vendi_gradient(values, alpha, truncation), leaf.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("alpha,truncation", [(1, None), (0.5, None), (3, None), ("inf", None), (1, 4), (2, 4)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradient_replicates_equal_the_dense_gradient_matrix(alpha, truncation, dtype):
    """tr(G E_a) from the pairs whose g_i is not the tail's (plus g_D tr E_a) against the whole G = U diag(g) U^T
    formed in float64, on a rank-deficient C (zero eigenvalues: their g is the tail's)."""
    generator = torch.Generator().manual_seed(3)
    phi = torch.randn(9, 16, generator=generator, dtype=torch.float64)  # rank 9 of 16
    moment = phi.T @ phi / 9
    draws = [phi.T @ (torch.randn(9, 1, generator=generator, dtype=torch.float64) * phi) / 9 for _ in range(3)]
    values, vectors = torch.linalg.eigh(moment.to(dtype))
    values, vectors = values.double().flip(0).clamp_min(0.0), vectors.flip(1)
    values[9:] = 0.0  # the round-off of the null space, as `psd_eigh` zeroes it
    gradient = vendi_gradient(values, alpha, truncation)
    assert int((gradient != gradient[-1]).sum()) < 16  # some pairs are left out
    dense = (vectors.double() * gradient) @ vectors.double().T
    want = torch.stack([(dense * draw).sum() for draw in draws])
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    scale = float(gradient.abs().max()) * max(float(draw.abs().sum()) for draw in draws)
    torch.testing.assert_close(gradient_replicates(gradient, vectors, draws), want, rtol=0, atol=tolerance * scale)


def test_truncated_and_inf_se_from_the_top_pairs_by_lanczos_equal_the_dense_route():
    """At 2r = 1,024 the t-truncated (t = 10) and order-inf se read the top pairs by Lanczos (`top_eigh`) beside the
    score's spectrum; the dense ``eigh`` of every pair gives the same se. Fewer vectors than the gradient needs
    raise."""
    x = mixture(300, seed=9)
    for alpha, truncation in (([1, 2, "inf"], 10), ("inf", None)):
        metric = FKEAVendi(sigma=1.5, n_frequencies=512, alpha=alpha, truncation=truncation, noise_draws=2)
        metric.update(x)
        got = metric.reading().summary()["se"]
        noise = metric.reading().samples.noise_sums()
        want = vendi_standard_errors(noise, alpha, truncation, metric.precision)
        for order in ([alpha] if isinstance(alpha, str) else alpha):
            value, expected = (got, want) if isinstance(alpha, str) else (got[order], want[order])
            assert float(value) == pytest.approx(float(expected), rel=1e-6), (order, truncation)
    moment = noise.moment()
    values, vectors = torch.linalg.eigh(moment)
    gradient = vendi_gradient(values.flip(0).clamp_min(0.0), 1)
    with pytest.raises(ValueError, match="pass them all"):
        gradient_replicates(gradient, vectors.flip(1)[:, :5], [noise.draw(0)])


def oracle_se(x, sigma, r, draws, alpha, truncation):
    """RMS over draws of <dV/dC, E_a>: the draws sample by sample (`draws_exact`), dV/dC by autograd through
    eigvalsh of the n x n-built C."""
    rff = GaussianRFF(x.shape[1], r, sigma=sigma, seed=0)
    moment, noise = draws_exact(x, rff, Multipliers(draws, sigma, 0, DEFAULT_RATIO))
    leaf = moment.clone().requires_grad_(True)
    spectrum = torch.linalg.eigvalsh(leaf).flip(0).clamp_min(0.0)
    vendi_from_spectrum(spectrum, alpha, truncation, n=x.shape[0]).backward()  # RKE from pairs i != j
    replicates = torch.stack([(leaf.grad * noise[a]).sum() for a in range(draws)])
    return float(replicates.pow(2).mean().sqrt())


@pytest.mark.parametrize("alpha,truncation", [(1, None), (2, None), ("inf", None), (1, 4), (2, 4)])
def test_fkea_se_equals_the_n_by_n_oracle(alpha, truncation):
    x = mixture(400, seed=2)
    metric = FKEAVendi(sigma=1.5, n_frequencies=24, alpha=alpha, truncation=truncation, chunk_size=64, noise_draws=3)
    for batch in x.flip(0).split(57):
        metric.update(batch)
    summary = metric.reading().summary()
    assert float(summary["se"]) == pytest.approx(oracle_se(x, 1.5, 24, 3, alpha, truncation), rel=1e-6)
    assert float(summary["se"]) > 0


def test_several_orders_give_one_se_each_and_no_draws_give_none():
    x = mixture(300, seed=3)
    several = FKEAVendi(sigma=1.5, n_frequencies=24, alpha=[1, 2])
    several.update(x)
    summary = several.reading().summary()
    assert set(summary["se"]) == {1, 2}
    for order in (1, 2):
        single = FKEAVendi(sigma=1.5, n_frequencies=24, alpha=order)
        single.update(x)
        assert float(single.reading().summary()["se"]) == pytest.approx(float(summary["se"][order]), rel=1e-9)
    bare = FKEAVendi(sigma=1.5, n_frequencies=24, noise_draws=0)
    bare.update(x)
    assert "se" not in bare.reading().summary() and float(bare.compute()) == pytest.approx(float(summary[""][1]), rel=1e-12)


def test_fkea_se_matches_the_spread_over_fresh_samples():
    """Mean se^2 over 60 draws of n = 500 against the variance of the 60 scores (Vendi-1 and RKE)."""
    scores, squares = {1: [], 2: []}, {1: [], 2: []}
    for seed in range(60):
        metric = FKEAVendi(sigma=1.5, n_frequencies=32, alpha=[1, 2], seed=0, noise_draws=2)
        metric.update(mixture(500, seed=100 + seed))
        summary = metric.reading().summary()
        for order in (1, 2):
            scores[order].append(float(summary[""][order]))
            squares[order].append(float(summary["se"][order]) ** 2)
    for order in (1, 2):
        ratio = sum(squares[order]) / len(squares[order]) / torch.tensor(scores[order]).var().item()
        assert 0.6 < ratio < 1.6, (order, ratio)


def explicit_mmd_se(x, y, sigma, r):
    rff = GaussianRFF(x.shape[1], r, sigma=sigma, seed=0)
    phi_x, phi_y = rff(x).double(), rff(y).double()
    delta = phi_x.mean(0) - phi_y.mean(0)
    cov = lambda phi: torch.cov(phi.T, correction=0)  # noqa: E731
    sigma_ = cov(phi_x) / x.shape[0] + cov(phi_y) / y.shape[0]
    trace_sq = float((sigma_ @ sigma_).trace())
    return math.sqrt(max(4 * float(delta @ sigma_ @ delta) - 2 * trace_sq, 2 * trace_sq))


def test_mmd_se_equals_the_explicit_features():
    x, y = mixture(300, seed=4), mixture(200, seed=5) + 0.4
    metric = FastMMD(sigma=1.5, n_frequencies=32)
    for batch in x.split(70):
        metric.update(batch, real=True)
    metric.update(y, real=False)
    summary = metric.reading().summary()
    assert float(summary["se"]) == pytest.approx(explicit_mmd_se(x, y, 1.5, 32), rel=1e-9)
    assert (float(summary["n"]), float(summary["n_real"]), float(summary["n_features"])) == (200.0, 300.0, 64.0)
    several = FastMMD(sigma=[1.5, 3.0], n_frequencies=32)
    several.update(x, real=True)
    several.update(y, real=False)
    assert float(several.reading().summary()["se"][0]) == pytest.approx(float(summary["se"]), rel=1e-9)
    assert "se" not in updated_statistic_only(x, y).reading().summary()


def updated_statistic_only(x, y):
    metric = FastMMD(sigma=1.5, n_frequencies=32, statistic_only=True)
    metric.update(x, real=True)
    metric.update(y, real=False)
    return metric


def test_mmd_se_matches_the_spread_over_fresh_samples():
    values, squares = [], []
    for seed in range(80):
        metric = FastMMD(sigma=1.5, n_frequencies=32)
        metric.update(mixture(300, seed=200 + seed), real=True)
        metric.update(mixture(300, seed=400 + seed) + 0.3, real=False)
        summary = metric.reading().summary()
        values.append(float(summary[""]))
        squares.append(float(summary["se"]) ** 2)
    ratio = sum(squares) / len(squares) / torch.tensor(values).var().item()
    assert 0.7 < ratio < 1.4, ratio


def test_the_draws_travel_in_the_checkpoint():
    x = mixture(300, seed=6)
    metric = FKEAVendi(sigma=1.5, n_frequencies=16, alpha=[1, 2], truncation=5)
    metric.update(x)
    state = metric.state_dict()
    width = 32
    triangle = width * (width + 1) // 2
    assert state["_extra_state"]["sums"]["samples"].shape == (1 + width + triangle + 2 * (1 + triangle),)
    restored = FKEAVendi(sigma=1.5, n_frequencies=16, alpha=[1, 2], truncation=5)
    restored.load_state_dict(state)
    for order in (1, 2):
        assert float(restored.reading().summary()["se"][order]) == float(metric.reading().summary()["se"][order])
    with pytest.raises(ValueError, match="build the metric with the settings it was saved with"):
        FKEAVendi(sigma=1.5, n_frequencies=16, noise_draws=3).load_state_dict(state)


def test_order_and_last_bits_do_not_move_the_se():
    x = mixture(400, seed=8).float()
    metric, moved = (FKEAVendi(sigma=1.5, n_frequencies=24, alpha=[1, 2]) for _ in range(2))
    metric.update(x)
    moved.update(torch.nextafter(x, torch.full_like(x, math.inf)).flip(0))
    for order in (1, 2):
        a, b = float(metric.reading().summary()["se"][order]), float(moved.reading().summary()["se"][order])
        assert b == pytest.approx(a, rel=1e-4)


@pytest.mark.parametrize("kernel", ["gaussian", "cosine"])
def test_spec_se_equals_finite_differences_of_the_n_by_n_draws(kernel):
    """Oracle: the draws sample by sample (`draws_exact` through the metric's own map and multipliers), the top
    |eigenvalue| of the non-symmetric S (C + h E_a) by `torch.linalg.eigvals` (no Cholesky), h -> 0."""
    from lightning_spectral.metrics import SPECDivergence

    a = mixture(300, seed=9)
    b = a[:, :2] @ torch.randn(2, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    sigmas = (1.5, 1.0) if kernel == "gaussian" else (None, None)
    metric = SPECDivergence(kernel, *sigmas, n_frequencies=16, noise_draws=3, chunk_size=64)
    for part in torch.arange(300).flip(0).split(41):
        metric.update(a[part], b[part])
    summary = metric.reading().summary()
    moment, noise = draws_exact(torch.cat([a, b], 1), metric.feature_map, metric.joint.multipliers)
    width_a = metric.feature_map.widths[0]
    signs = torch.ones(moment.shape[0], dtype=torch.float64)
    signs[width_a:] = -1.0

    def top(matrix):
        return float(torch.linalg.eigvals(signs[:, None] * matrix).abs().max())

    h = 1e-6
    moves = torch.tensor([(top(moment + h * noise[i]) - top(moment - h * noise[i])) / (2 * h) for i in range(3)])
    assert float(summary[""]) == pytest.approx(top(moment), rel=1e-6)
    assert float(summary["se"]) == pytest.approx(float(moves.pow(2).mean().sqrt()), rel=1e-4)
    assert float(summary["se"]) > 0


def test_spec_se_matches_the_spread_over_fresh_samples():
    from lightning_spectral.metrics import SPECDivergence

    values, squares = [], []
    projection = torch.randn(3, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for seed in range(60):
        a = mixture(400, seed=600 + seed)
        metric = SPECDivergence("gaussian", 1.5, 1.5, n_frequencies=32)
        metric.update(a, torch.tanh(a @ projection))
        summary = metric.reading().summary()
        values.append(float(summary[""]))
        squares.append(float(summary["se"]) ** 2)
    ratio = sum(squares) / len(squares) / torch.tensor(values).var().item()
    assert 0.6 < ratio < 1.6, ratio


def test_conditional_vendi_se_equals_autograd_through_the_n_by_n_draws():
    """CV = V(C_J) / V(C_T), both sides' draws from one multiplier per row (`draws_exact`), dCV/dC by autograd."""
    from lightning_spectral.metrics import ConditionalVendi

    x, t = mixture(300, seed=10), mixture(300, seed=11)[:, :2]
    x = x + t.sum(1, keepdim=True)  # the samples follow the prompts
    metric = ConditionalVendi(1.5, 1.0, 16, alpha=[1, 2, "inf"], noise_draws=3, chunk_size=64, precision="float64")
    for part in torch.arange(300).flip(0).split(53):
        metric.update(x[part], t[part])
    summary = metric.reading().summary()
    rows = torch.cat([x, t], 1)
    multipliers = metric.accumulators["joint"].multipliers
    c_joint, e_joint = draws_exact(rows, metric.accumulators["joint"].feature_map, multipliers)
    c_prompts, e_prompts = draws_exact(rows, metric.accumulators["prompts"].feature_map, multipliers)
    for order in (1, 2, "inf"):
        joint, prompts = c_joint.clone().requires_grad_(True), c_prompts.clone().requires_grad_(True)
        spectrum = lambda c: torch.linalg.eigvalsh(c).flip(0).clamp_min(0.0)  # noqa: E731
        value = vendi_from_spectrum(spectrum(joint), order, n=300) / vendi_from_spectrum(spectrum(prompts), order, n=300)
        value.backward()
        moves = torch.stack([(joint.grad * e_joint[a]).sum() + (prompts.grad * e_prompts[a]).sum() for a in range(3)])
        assert float(summary[""][order]) == pytest.approx(float(value), rel=1e-8)
        assert float(summary["se"][order]) == pytest.approx(float(moves.pow(2).mean().sqrt()), rel=1e-6), order
        assert float(summary["se"][order]) > 0
    labelled = ConditionalVendi(1.5, 1.0, 16, num_classes=3, label_prompts=True)
    labelled.update(x[:30], torch.arange(30) % 3)
    assert "se" not in labelled.reading().summary()  # no prompt-side draws: no se rather than a wrong one


def test_conditional_vendi_se_matches_the_spread_over_fresh_samples():
    from lightning_spectral.metrics import ConditionalVendi

    values, squares = [], []
    for seed in range(60):
        t = mixture(400, seed=800 + seed)[:, :2]
        noise = torch.randn(400, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        x = t.sum(1, keepdim=True) + noise
        metric = ConditionalVendi(1.5, 1.0, 32, alpha=2)
        metric.update(x, t)
        summary = metric.reading().summary()
        values.append(float(summary[""]))
        squares.append(float(summary["se"]) ** 2)
    ratio = sum(squares) / len(squares) / torch.tensor(values).var().item()
    assert 0.6 < ratio < 1.6, ratio


def test_every_conditional_vendi_score_se_equals_autograd_through_the_n_by_n_draws():
    """Information-Vendi V_X V_T / V_J, the samples' and the prompts' Vendi: autograd through the three sides'
    n x n-built moments in the direction of their draws (one multiplier per row, `draws_exact`); the prompt-agnostic
    share tr(Lambda): central finite differences of the Schur complement of the n x n-built paired moment."""
    from lightning_spectral.functional.conditional import prompt_agnostic_covariance
    from lightning_spectral.metrics import ConditionalVendi

    x, t = mixture(240, seed=12), mixture(240, seed=13)[:, :2]
    x = x + t.sum(1, keepdim=True)
    metric = ConditionalVendi(1.5, 1.0, 12, alpha=[1, 2], noise_draws=3, chunk_size=64, precision="float64",
                              prompt_agnostic=True, ridge=1e-2)
    for part in torch.arange(240).flip(0).split(47):
        metric.update(x[part], t[part])
    summary = metric.reading().summary()
    rows = torch.cat([x, t], 1)
    multipliers = metric.accumulators["joint"].multipliers
    exact = {name: draws_exact(rows, metric.accumulators[name].feature_map, multipliers)
             for name in ("joint", "samples", "prompts", "paired")}
    spectrum = lambda c: torch.linalg.eigvalsh(c).flip(0).clamp_min(0.0)  # noqa: E731
    for order in (1, 2):
        leaves = {name: exact[name][0].clone().requires_grad_(True) for name in ("joint", "samples", "prompts")}
        vendi = {name: vendi_from_spectrum(spectrum(leaf), order, n=240) for name, leaf in leaves.items()}
        for key, value in (("information", vendi["samples"] * vendi["prompts"] / vendi["joint"]),
                           ("vendi", vendi["samples"]), ("prompt_vendi", vendi["prompts"])):
            grads = torch.autograd.grad(value, list(leaves.values()), retain_graph=True, allow_unused=True,
                                        materialize_grads=True)
            moves = torch.stack([sum((g * exact[name][1][a]).sum() for g, name in zip(grads, leaves, strict=True))
                                 for a in range(3)])
            assert float(summary[key][order]) == pytest.approx(float(value), rel=1e-8), key
            assert float(summary[f"{key}_se"][order]) == pytest.approx(float(moves.pow(2).mean().sqrt()), rel=1e-6)
            assert float(summary[f"{key}_se"][order]) > 0
    moment, noise = exact["paired"]
    width_x = metric.feature_map.out_features

    def share(matrix):
        return float(prompt_agnostic_covariance(matrix, width_x, 1e-2).trace())

    h = 1e-6
    moves = torch.tensor([(share(moment + h * noise[a]) - share(moment - h * noise[a])) / (2 * h) for a in range(3)])
    assert float(summary["prompt_agnostic_share"]) == pytest.approx(share(moment), rel=1e-8)
    assert float(summary["prompt_agnostic_share_se"]) == pytest.approx(float(moves.pow(2).mean().sqrt()), rel=1e-5)
    assert float(summary["prompt_agnostic_share_se"]) > 0
    assert "prompt_se" not in summary and "min_prompt_vendi_se" not in summary


def test_rff_covariance_se_is_the_entrywise_spread_of_the_n_by_n_draws():
    """C is linear in the sums: each draw E_a (`draws_exact`, sample by sample) is its replicate, no derivative."""
    from lightning_spectral.metrics import RFFCovariance

    x = mixture(300, seed=14)
    metric = RFFCovariance(1.5, 12, noise_draws=3, chunk_size=64)
    for part in torch.arange(300).flip(0).split(61):
        metric.update(x[part])
    summary = metric.reading().summary()
    moment, noise = draws_exact(x, metric.feature_map, metric.samples.multipliers)
    torch.testing.assert_close(summary[""], moment, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(summary["se"], noise.square().mean(0).sqrt(), rtol=1e-8, atol=1e-13)
    assert float(summary["se"].min()) > 0 and set(summary) == {"", "se", "sigma"}
    plain = RFFCovariance(1.5, 12)
    plain.update(x)
    assert "se" not in plain.reading().summary()
    with pytest.raises(RuntimeError, match="noise_draws=0"):
        plain.reading().standard_error()


def test_spec_cluster_eigenvalue_ses_equal_finite_differences_of_the_n_by_n_draws():
    """Every top eigenvalue of either sign (DriftMonitor's `lost` / `new`), not only the largest |lambda|."""
    from lightning_spectral.callbacks.drift_monitor import _DriftDivergence

    a = mixture(300, seed=15)
    b = torch.tanh(a @ torch.randn(3, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    metric = _DriftDivergence("gaussian", 1.5, 1.5, n_frequencies=12, noise_draws=3, chunk_size=64, top=3)
    for part in torch.arange(300).flip(0).split(41):
        metric.update(a[part], b[part])
    summary = metric.reading().summary()
    moment, noise = draws_exact(torch.cat([a, b], 1), metric.feature_map, metric.joint.multipliers)
    signs = torch.ones(moment.shape[0], dtype=torch.float64)
    signs[metric.feature_map.widths[0]:] = -1.0

    def top(matrix, sign):
        values = torch.linalg.eigvals(signs[:, None] * matrix).real * sign
        return values.sort(descending=True).values[:3]

    h = 1e-6
    for key, sign in (("lost", 1), ("new", -1)):
        moves = torch.stack([(top(moment + h * noise[i], sign) - top(moment - h * noise[i], sign)) / (2 * h)
                             for i in range(3)])
        torch.testing.assert_close(summary[key], top(moment, sign), rtol=1e-6, atol=1e-10)
        torch.testing.assert_close(summary[f"{key}_se"], moves.pow(2).mean(0).sqrt(), rtol=1e-4, atol=1e-9)
        assert bool((summary[f"{key}_se"] > 0).all())


def test_conditional_per_prompt_se_are_the_autograd_replicates_of_each_labels_oracle_draws():
    """Each label's Vendi moves along its own draws (its rows, the samples' multipliers, `draws_exact`) by
    tr(grad V E_a); min_prompt_vendi_se is the se of the minimising label (the plug-in)."""
    from lightning_spectral.metrics import ConditionalVendi

    x = mixture(300, seed=15)
    labels = torch.arange(300) % 3
    x[labels == 2] = 0.2 * x[labels == 2]  # a less diverse label
    metric = ConditionalVendi(1.5, 0.1, 16, alpha=[1, 2], noise_draws=3, num_classes=3, per_prompt_frequencies=8,
                              chunk_size=64, precision="float64")
    for part in torch.arange(300).flip(0).split(41):
        metric.update(x[part], labels[part])
    summary = metric.reading().summary()
    accumulator = metric.accumulators["per_prompt"]
    spectrum = lambda c: torch.linalg.eigvalsh(c).flip(0).clamp_min(0.0)  # noqa: E731
    for order in (1, 2):
        errors = metric.reading().per_prompt_standard_errors(order)
        for label in range(3):
            moment, draws = draws_exact(x[labels == label], accumulator.feature_map, accumulator.multipliers)
            leaf = moment.clone().requires_grad_(True)
            rows = int((labels == label).sum())
            (grad,) = torch.autograd.grad(vendi_from_spectrum(spectrum(leaf), order, n=rows), [leaf])
            moves = torch.stack([(grad * draws[a]).sum() for a in range(3)])
            assert float(errors[label]) == pytest.approx(float(moves.pow(2).mean().sqrt()), rel=1e-6)
            assert float(errors[label]) > 0
    torch.testing.assert_close(summary["prompt_se"], metric.reading().per_prompt_standard_errors(1), rtol=0, atol=0)
    lowest = int(torch.argmin(summary["prompt"]))
    assert lowest == 2 and float(summary["min_prompt_vendi_se"]) == float(summary["prompt_se"][lowest])


def test_fkea_se_and_score_through_the_range_finder_equal_the_dense_route():
    """n = 300 samples at 2r = 1,024: rank(C) <= 300, so `psd_eigh` with ``rank`` takes the range finder
    (`use_range_finder`); the se of every order and the score read from its spectrum equal the dense ``eigh``'s and
    ``eigvalsh``'s (float64 at this width)."""
    from lightning_spectral.algebra.eigen import use_range_finder

    x = mixture(300, seed=4)
    orders = [0.5, 1, 2, 3]
    metric = FKEAVendi(sigma=1.5, n_frequencies=512, alpha=orders, noise_draws=2)
    metric.update(x)
    assert use_range_finder(metric.feature_map.out_features, metric.sample_count())
    summary = metric.reading().summary()
    noise = metric.reading().samples.noise_sums()
    want = vendi_standard_errors(noise, orders, None, metric.precision)  # the dense eigh of every pair
    fresh = FKEAVendi(sigma=1.5, n_frequencies=512, alpha=orders, noise_draws=0)
    fresh.update(x)
    scores = fresh.compute()  # psd_eigenvalues' eigvalsh
    for order in orders:
        assert float(summary["se"][order]) == pytest.approx(float(want[order]), rel=1e-7), order
        assert float(summary[""][order]) == pytest.approx(float(scores[order]), rel=1e-7), order  # 1e-8 at 0.5
