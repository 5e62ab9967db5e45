"""SPEC: routes against the exact n x n oracle, the digest's section-6 properties, SPECDivergence, the loss."""

import math

import pytest
import torch

from lightning_spectral.functional import match_bandwidth, spec, spec_align_loss, spec_diff_exact
from lightning_spectral.functional.spec import kernel_matrix, kernel_top_eigenvalue
from lightning_spectral.kernels import PairedFeatureMap
from lightning_spectral.metrics import SPECDivergence
from tests.ddp import run_ddp

SIGMA = 2.0


def three_clusters(seed=0, n_per=100, d=10, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    centers = 4.0 * torch.randn(3, d, generator=g, dtype=torch.float64)
    labels = torch.arange(3).repeat_interleave(n_per)
    x = centers[labels] + spread * torch.randn(3 * n_per, d, generator=g, dtype=torch.float64)
    return x, labels, g


def dispersed(seed=0):
    """psi_1 has three tight clusters; psi_2 scatters cluster 0 (digest section 4.7 (a))."""
    psi1, labels, g = three_clusters(seed)
    psi2 = psi1.clone()
    psi2[labels == 0] = 5.0 * torch.randn(int((labels == 0).sum()), psi1.shape[1], generator=g, dtype=torch.float64)
    return psi1, psi2, labels


def merged(seed=0):
    """psi_2 moves cluster 1 onto cluster 0 (digest section 4.7 (b))."""
    psi1, labels, g = three_clusters(seed)
    psi2 = psi1.clone()
    shift = psi1[labels == 0].mean(0) - psi1[labels == 1].mean(0)
    psi2[labels == 1] += shift
    return psi1, psi2, labels


# ---------------------------------------------------------------- routes and identities


def test_exact_route_is_a_traceless_real_spectrum_in_unit_interval():
    a, b, _ = dispersed()
    matrix = (kernel_matrix(a, "gaussian", SIGMA) - kernel_matrix(b, "gaussian", SIGMA)) / a.shape[0]
    values = torch.linalg.eigvalsh(matrix)
    assert abs(float(values.sum())) < 1e-12
    assert float(values.abs().max()) <= 1.0
    result = spec(a, b, "gaussian", SIGMA, SIGMA, method="exact")
    assert torch.allclose(result.spec_diff, values.abs().max(), atol=1e-12)


def test_cosine_covariance_route_equals_exact_spectrum():
    """Proposition 1 with finite features: the non-zero eigenvalues of Gamma and Lambda agree."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(200, 6, generator=g, dtype=torch.float64)
    b = torch.randn(200, 9, generator=g, dtype=torch.float64) + a[:, :1]
    exact = spec(a, b, "cosine", method="exact")
    route = spec(a, b, "cosine", method="covariance", chunk_size=37)
    assert route.eigenvalues.shape == exact.eigenvalues.shape == (15,)
    assert torch.allclose(route.eigenvalues, exact.eigenvalues, atol=1e-10)
    for side in ("clusters_a", "clusters_b"):  # the eigenvectors agree up to sign: compare |u|
        e, r = getattr(exact, side), getattr(route, side)
        assert torch.allclose(e.vectors.abs(), r.vectors.abs(), atol=1e-6)


def test_covariance_route_vectors_are_eigenvectors_of_lambda():
    a, b, _ = dispersed()
    result = spec(a, b, "cosine", method="covariance", k=3)
    matrix = (kernel_matrix(a, "cosine", None) - kernel_matrix(b, "cosine", None)) / a.shape[0]
    for clusters in (result.clusters_a, result.clusters_b):
        residual = matrix @ clusters.vectors - clusters.vectors * clusters.eigenvalues
        assert float(residual.abs().max()) < 1e-10
        assert torch.allclose(clusters.vectors.norm(dim=0), torch.ones(clusters.vectors.shape[1], dtype=torch.float64))
        assert bool((clusters.vectors.sum(0) >= 0).all())


def test_gaussian_covariance_route_equals_the_rff_kernel_matrix():
    """The RFF route is exact for the proxy kernel K~ = Phi Phi^T."""
    a, b, _ = dispersed()
    paired = PairedFeatureMap("gaussian", (10, 10), (SIGMA, SIGMA), n_frequencies=64, seed=3)
    phi_a, phi_b = paired.map_a(a), paired.map_b(b)
    proxy = torch.linalg.eigvalsh((phi_a @ phi_a.T - phi_b @ phi_b.T) / a.shape[0]).flip(0)
    route = spec(a, b, "gaussian", SIGMA, SIGMA, n_frequencies=64, seed=3, method="covariance")
    assert torch.allclose(route.eigenvalues[:5], proxy[:5], atol=1e-10)
    assert torch.allclose(route.eigenvalues[-5:], proxy[-5:], atol=1e-10)


def test_rff_route_converges_to_exact_as_frequencies_grow():
    """Error of the RFF proxy spectrum ~ m^{-1/2} (digest section 6.5); the proxy is the covariance route's
    matrix (previous test), formed here as n x n because n = 300 < 4m."""
    a, b, _ = dispersed()
    exact = spec_diff_exact(a, b, "gaussian", SIGMA, SIGMA)
    errors = {}
    for m in (64, 4096):
        runs = []
        for seed in range(3):
            paired = PairedFeatureMap("gaussian", (10, 10), (SIGMA, SIGMA), n_frequencies=m, seed=seed)
            phi_a, phi_b = paired.map_a(a), paired.map_b(b)
            runs.append(torch.linalg.eigvalsh((phi_a @ phi_a.T - phi_b @ phi_b.T) / 300).abs().max())
        errors[m] = sum(abs(float(r - exact)) for r in runs) / 3
    assert errors[4096] < errors[64] / 3  # ~ m^{-1/2}: 8x expected
    assert errors[4096] < 0.01


def test_auto_route_picks_the_smaller_problem_and_agrees():
    a, b, _ = dispersed()
    small = spec(a[::3], b[::3], "cosine")  # n = 100 > D = 20: covariance
    exact = spec(a[::3], b[::3], "cosine", method="exact")
    assert torch.allclose(small.spec_diff, exact.spec_diff, atol=1e-10)


def test_identity_symmetry_and_triangle_inequality():
    a, b, _ = dispersed()
    c, _, _ = merged()
    assert float(spec(a, a, "gaussian", SIGMA, SIGMA, 256, method="covariance").spec_diff) < 1e-9  # shared draws
    assert float(spec_diff_exact(a, a, "gaussian", SIGMA, SIGMA)) < 1e-12
    forward, backward = spec(a, b, "gaussian", SIGMA, SIGMA), spec(b, a, "gaussian", SIGMA, SIGMA)
    assert torch.allclose(forward.spec_diff, backward.spec_diff, atol=1e-12)
    assert torch.allclose(forward.eigenvalues, -backward.eigenvalues.flip(0), atol=1e-10)
    ab, bc, ac = (spec_diff_exact(x, y, "gaussian", SIGMA, SIGMA) for x, y in ((a, b), (b, c), (a, c)))
    assert float(ac) <= float(ab + bc) + 1e-12


def test_identical_embeddings_have_no_clusters_on_any_route():
    """Round-off eigenvalues (~1e-16) of a zero difference are not reported as clusters."""
    a, _, _ = dispersed()
    for method in ("covariance", "exact"):
        result = spec(a, a, "cosine", method=method)
        assert len(result.clusters_a.members) == 0 and len(result.clusters_b.members) == 0, method
    metric = SPECDivergence("cosine", in_features=(a.shape[1], a.shape[1]))
    metric.update(a, a)
    reading = metric.reading()
    assert reading.spectrum().numel() == 0 and reading.clusters(3, sign=1).eigenvalues.numel() == 0


def test_float32_spectrum_stays_within_float32_rounding_and_keeps_the_clusters():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(600, 48, generator=g, dtype=torch.float64)
    b = torch.cat([a[:, :16], torch.randn(600, 40, generator=g, dtype=torch.float64)], 1)
    b[:100] = 0.1 * torch.randn(100, 56, generator=g, dtype=torch.float64) + 3.0  # a cluster b has and a lacks
    exact = spec(a, b, "cosine", method="covariance", precision="float64")
    single = spec(a, b, "cosine", method="covariance", precision="float32")
    scale = float(exact.spec_diff)
    assert abs(float(single.spec_diff) - scale) <= 1e-6 * scale
    big = exact.eigenvalues.abs() > 1e-5 * scale  # float32 drops what is below its round-off
    assert torch.allclose(single.eigenvalues[single.eigenvalues.abs() > 1e-5 * scale], exact.eigenvalues[big],
                          atol=1e-6 * scale, rtol=0)
    for side in ("clusters_a", "clusters_b"):  # the same float64 eigenvectors: the same members
        assert torch.equal(getattr(single, side).members, getattr(exact, side).members)
    same = spec(a, a, "cosine", method="covariance", precision="float32")
    assert len(same.clusters_a.members) == 0 and len(same.clusters_b.members) == 0
    with pytest.raises(ValueError, match="precision"):
        spec(a, b, "cosine", precision="half")


def test_invariances():
    a, _, _ = dispersed()
    g = torch.Generator().manual_seed(5)
    rotation = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64))[0]
    moved = a @ rotation + 3.0
    assert float(spec_diff_exact(a, moved, "gaussian", SIGMA, SIGMA)) < 1e-10
    scaled = a * (0.5 + torch.rand(a.shape[0], 1, generator=g, dtype=torch.float64))
    assert float(spec(a, scaled @ rotation, "cosine").spec_diff) < 1e-10
    permutation = torch.randperm(a.shape[0], generator=g)
    b = dispersed()[1]
    original = spec(a, b, "gaussian", SIGMA, SIGMA, method="exact")
    permuted = spec(a[permutation], b[permutation], "gaussian", SIGMA, SIGMA, method="exact")
    assert torch.allclose(original.eigenvalues, permuted.eigenvalues, atol=1e-10)
    assert torch.equal(
        permutation[permuted.clusters_a.members[0]].sort().values, original.clusters_a.members[0].sort().values
    )


# ---------------------------------------------------------------- what the clusters mean


@pytest.mark.parametrize("method", ["exact", "covariance"])
def test_dispersed_cluster_is_an_isolated_positive_eigenvalue_on_its_members(method):
    a, b, labels = dispersed()
    result = spec(a, b, "gaussian", SIGMA, SIGMA, n_frequencies=256, method=method, k=2, per_cluster=50)
    first, second = result.clusters_a.eigenvalues
    assert float(first) > 0.15 and float(first) > 3 * float(second)
    vector = result.clusters_a.vectors[:, 0]
    assert float(vector[labels == 0].square().sum()) > 0.95
    assert bool((labels[result.clusters_a.members[0]] == 0).all())
    assert torch.isclose(result.spec_diff, first)


def test_merged_clusters_give_a_negative_eigenvalue_and_a_positive_contrast():
    a, b, labels = merged()
    result = spec(a, b, "gaussian", SIGMA, SIGMA, method="exact", k=1)
    negative = result.clusters_b.vectors[:, 0]  # captured by psi_2 (merged A u B), not by psi_1
    assert float(result.clusters_b.eigenvalues[0]) < -0.1
    means = [float(negative[labels == c].mean()) for c in range(3)]
    assert means[0] > 0.03 and means[1] > 0.03 and abs(means[2]) < 1e-3
    positive = result.clusters_a.vectors[:, 0]  # a contrast: opposite signs on A and B
    assert float(result.clusters_a.eigenvalues[0]) > 0.1
    assert float(positive[labels == 0].mean()) * float(positive[labels == 1].mean()) < 0
    swapped = spec(b, a, "gaussian", SIGMA, SIGMA, method="exact", k=1)
    assert torch.isclose(swapped.clusters_a.eigenvalues[0], -result.clusters_b.eigenvalues[0])


def test_match_bandwidth_equalises_top_eigenvalues():
    a, b, _ = dispersed()
    sigma = match_bandwidth(a, 7.0 * b, sigma_reference=SIGMA)
    assert abs(kernel_top_eigenvalue(7.0 * b, sigma) - kernel_top_eigenvalue(a, SIGMA)) < 0.01
    assert math.isclose(match_bandwidth(a, 7.0 * a, SIGMA), 7.0 * SIGMA, rel_tol=2e-3)


# ---------------------------------------------------------------- bad input


def test_bad_input_raises_clear_errors():
    a, b, _ = dispersed()
    with pytest.raises(ValueError, match="SAME samples"):
        spec(a, b[:-1], "cosine")
    with pytest.raises(ValueError, match="norm"):
        spec(torch.cat([a[:-1], torch.zeros(1, 10, dtype=torch.float64)]), b, "cosine")
    with pytest.raises(ValueError, match="sigma_a"):
        spec(a, b, "gaussian", 0.0, 1.0)
    with pytest.raises(ValueError, match="sigma"):
        spec(a, b, "gaussian")
    with pytest.raises(ValueError, match="NaN"):
        spec(a, torch.full_like(b, float("nan")), "cosine")
    with pytest.raises(ValueError, match="method"):
        spec(a, b, "cosine", method="eig")
    with pytest.raises(ValueError, match="kernel"):
        spec(a, b, "laplace")
    with pytest.raises(ValueError, match="n_frequencies"):
        spec(a, b, "gaussian", 1.0, 1.0, n_frequencies=0)
    with pytest.raises(ValueError, match="SAME samples"):
        spec_align_loss(a[:5], b[:4])
    with pytest.raises(ValueError, match="`in_features` must be a pair"):
        SPECDivergence("cosine", in_features=(3,))
    lazy = SPECDivergence("cosine")  # the widths come from the first batch (and are agreed across ranks)
    lazy.update(a, b)
    assert lazy.in_features == (10, 10) and float(lazy.compute()) > 0
    with pytest.raises(ValueError, match="sigma_a"):
        SPECDivergence("gaussian", sigma_a=-1.0, sigma_b=1.0)
    metric = SPECDivergence("cosine", in_features=(10, 10))
    with pytest.raises(ValueError, match="SAME samples"):
        metric.update(a, b[:3])
    with pytest.raises(ValueError, match="widths"):
        metric.update(a[:, :5], b[:, :5])
    with pytest.raises(RuntimeError, match="no samples"):
        metric.compute()


# ---------------------------------------------------------------- the metric


def test_metric_streams_to_the_functional_result_and_reports_clusters():
    a, b, labels = dispersed()
    metric = SPECDivergence("gaussian", SIGMA, SIGMA, n_frequencies=512, seed=4)
    for start in range(0, 300, 64):
        metric.update(a[start : start + 64], b[start : start + 64])
    reference = spec(a, b, "gaussian", SIGMA, SIGMA, n_frequencies=512, seed=4, method="covariance")
    assert torch.allclose(metric.compute(), reference.spec_diff, atol=1e-10)
    reading = metric.reading()
    assert torch.allclose(reading.spectrum(), reference.eigenvalues, atol=1e-10)
    clusters = reading.clusters(k=1, sign=1)
    assert torch.allclose(clusters.eigenvalues, reference.clusters_a.eigenvalues[:1], atol=1e-10)
    batches = [((a[s : s + 50], b[s : s + 50]), torch.arange(s, s + 50)) for s in range(0, 300, 50)]
    ((ids, scores),) = reading.top_samples(batches, k=1, sign=1, per_cluster=40)
    assert bool((labels[ids] == 0).all())
    assert torch.allclose(scores, reference.clusters_a.vectors[ids, 0], atol=1e-8)  # unit-vector entries
    assert len(reading.clusters(k=5, sign=-1).eigenvalues) <= 5


def test_metric_state_dict_round_trip():
    a, b, _ = merged()
    metric = SPECDivergence("gaussian", SIGMA, SIGMA, n_frequencies=128)
    metric.update(a, b)
    restored = SPECDivergence("gaussian", SIGMA, SIGMA, n_frequencies=128)
    restored.load_state_dict(metric.state_dict())
    assert torch.equal(restored.compute(), metric.compute())


def _ddp_spec(rank, world_size, a, b):
    metric = SPECDivergence("cosine", in_features=(a.shape[1], b.shape[1]))
    if rank == 0:  # rank 1 sees nothing: contributes zeros, must not hang
        metric.update(a, b)
    batches = [((a, b), torch.arange(a.shape[0]))] if rank == 0 else []
    reading = metric.reading()
    return float(reading.value), reading.spectrum(), reading.top_samples(batches, k=1, per_cluster=10)


def _ddp_spec_split(rank, world_size, a, b):
    metric = SPECDivergence("gaussian", sigma_a=SIGMA, sigma_b=SIGMA, n_frequencies=64)
    metric.update(a[rank::world_size], b[rank::world_size])
    return float(metric.compute())


def test_metric_ddp_equals_single_process(tmp_path):
    a, b, _ = dispersed()
    single = SPECDivergence("cosine", in_features=(10, 10))
    single.update(a, b)
    results = run_ddp(_ddp_spec, a, b, tmp_path=tmp_path)
    reading = single.reading()
    for result in results:
        assert result[0] == "ok", result
        value, spectrum, ((ids, _),) = result[1]
        assert math.isclose(value, float(single.compute()), rel_tol=1e-10)
        assert torch.allclose(spectrum, reading.spectrum(), atol=1e-10)
        assert torch.equal(ids, reading.top_samples([((a, b), torch.arange(300))], k=1, per_cluster=10)[0][0])
    split = run_ddp(_ddp_spec_split, a, b, tmp_path=tmp_path)
    gaussian = SPECDivergence("gaussian", sigma_a=SIGMA, sigma_b=SIGMA, n_frequencies=64)
    gaussian.update(a, b)
    assert [r[0] for r in split] == ["ok", "ok"]
    assert all(math.isclose(r[1], float(gaussian.compute()), rel_tol=1e-9) for r in split)


# ---------------------------------------------------------------- the differentiable loss


def _finite_difference_check(student, reference, kernel, sigma=None):
    student = student.clone().requires_grad_(True)
    loss = spec_align_loss(student, reference, kernel, sigma, sigma, n_frequencies=16)
    loss.backward()
    exact_value = spec(student.detach(), reference, kernel, sigma, sigma, 16, method="covariance").spec_diff
    assert torch.allclose(loss.detach(), exact_value, atol=1e-10)
    g = torch.Generator().manual_seed(7)
    rows = torch.randint(student.shape[0], (6,), generator=g)
    cols = torch.randint(student.shape[1], (6,), generator=g)
    eps = 1e-5  # central differences: error ~ eps^2, plus the oracle's value error (~1e-13) / eps
    for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
        plus, minus = student.detach().clone(), student.detach().clone()
        plus[i, j] += eps
        minus[i, j] -= eps
        value = lambda x: float(spec(x, reference, kernel, sigma, sigma, 16, method="covariance").spec_diff)  # noqa: E731
        numeric = (value(plus) - value(minus)) / (2 * eps)
        assert math.isclose(float(student.grad[i, j]), numeric, rel_tol=1e-4, abs_tol=1e-8), (i, j)


@pytest.mark.parametrize("n", [12, 60])  # 12 <= D: n x n route; 60 > D: Gamma route
def test_loss_gradient_matches_finite_differences(n):
    g = torch.Generator().manual_seed(n)
    student = torch.randn(n, 7, generator=g, dtype=torch.float64)
    reference = torch.randn(n, 9, generator=g, dtype=torch.float64) + 2 * student[:, :1]
    _finite_difference_check(student, reference, "cosine")
    _finite_difference_check(student[:, :3], reference[:, :2], "gaussian", sigma=1.5)


def test_loss_routes_agree_and_survive_near_ties():
    """In the merge case the top positive and negative eigenvalues are nearly tied (digest pitfall 12)."""
    a, b, _ = merged()
    values = spec(a, b, "gaussian", SIGMA, SIGMA, method="exact").eigenvalues
    assert abs(float(values[0]) + float(values[-1])) < 0.05 * float(values[0])  # nearly tied
    student = a.clone().requires_grad_(True)
    loss = spec_align_loss(student, b, "gaussian", SIGMA, SIGMA, n_frequencies=64)  # 300 > 256: Gamma route
    loss.backward()
    paired = PairedFeatureMap("gaussian", (10, 10), (SIGMA, SIGMA), 64, 0)
    gram = spec_align_loss(a[:200], b[:200], feature_map=paired)  # 200 <= 256: n x n route
    covariance = spec(a[:200], b[:200], "gaussian", SIGMA, SIGMA, 64, method="covariance").spec_diff
    assert torch.allclose(gram, covariance, atol=1e-10)
    assert torch.isfinite(student.grad).all() and float(student.grad.abs().sum()) > 0
    assert torch.allclose(loss.detach(), spec(a, b, "gaussian", SIGMA, SIGMA, 64, method="covariance").spec_diff)


def test_loss_under_bf16_autocast_is_float32_and_close():
    g = torch.Generator().manual_seed(0)
    student = torch.randn(64, 16, generator=g).requires_grad_(True)
    reference = torch.randn(64, 24, generator=g)
    plain = spec_align_loss(student, reference)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = spec_align_loss(student, reference)
    assert mixed.dtype == torch.float32 and torch.allclose(mixed, plain, atol=1e-6)


def test_toy_alignment_lowers_spec_diff_and_raises_knn_accuracy():
    """A trainable linear map on inputs where the reference's clusters hide behind nuisance dimensions."""
    g = torch.Generator().manual_seed(0)
    n, labels = 600, torch.arange(600) % 3
    centers = 3.0 * torch.randn(3, 4, generator=g)
    x = torch.cat([centers[labels] + 0.3 * torch.randn(n, 4, generator=g), 4.0 * torch.randn(n, 12, generator=g)], 1)
    reference = torch.nn.functional.one_hot(labels, 8).float() + 0.1 * torch.randn(n, 8, generator=g)
    student = torch.nn.Linear(16, 8)
    torch.nn.init.normal_(student.weight, generator=g)

    def measure():
        with torch.no_grad():
            z = student(x)
        diff = float(spec(z, reference, "cosine").spec_diff)
        z = torch.nn.functional.normalize(z, dim=1)
        similarity = z @ z.T - 2 * torch.eye(n)  # leave-one-out 5-NN vote by cosine similarity
        votes = labels[similarity.topk(5, dim=1).indices]
        accuracy = float((votes.mode(dim=1).values == labels).float().mean())
        return diff, accuracy

    before = measure()
    optimiser = torch.optim.Adam(student.parameters(), lr=0.02)
    for _ in range(150):
        batch = torch.randperm(n, generator=g)[:128]
        loss = spec_align_loss(student(x[batch]), reference[batch])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    after = measure()
    print("toy alignment (spec_diff, knn) before", before, "after", after)
    assert after[0] <= 0.5 * before[0], (before, after)
    assert after[1] > before[1] + 0.1, (before, after)


@pytest.mark.parametrize("scale", [1e-300, 1e38, 1e300])
def test_exact_spec_and_match_bandwidth_are_scale_equivariant_at_extreme_magnitudes(scale):
    # spec_diff_exact returned NaN on +-1e300 (overflowing squared distances); it only depends on x / sigma
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(40, 3, generator=g, dtype=torch.float64), torch.randn(40, 2, generator=g, dtype=torch.float64)
    expected = spec_diff_exact(a, b, sigma_a=1.0, sigma_b=0.8)
    got = spec_diff_exact(a * scale, b * scale, sigma_a=scale, sigma_b=0.8 * scale)
    assert float(got) == pytest.approx(float(expected), rel=1e-8)
    assert match_bandwidth(a * scale, b * scale, sigma_reference=scale) == pytest.approx(
        match_bandwidth(a, b, sigma_reference=1.0) * scale, rel=1e-9
    )


def test_metric_called_like_a_function_without_in_features_returns_the_batch_value():
    """torchmetrics' forward copied the empty state before the first batch sized it (a size mismatch)."""
    g = torch.Generator().manual_seed(0)
    first, second = [(torch.randn(30, 4, generator=g), torch.randn(30, 3, generator=g)) for _ in range(2)]
    metric = SPECDivergence("cosine")
    batch_values = [metric(*first), metric(*second)]
    for value, pair in zip(batch_values, (first, second), strict=True):
        alone = SPECDivergence("cosine", in_features=(4, 3))
        alone.update(*pair)
        torch.testing.assert_close(value, alone.compute())
    both = SPECDivergence("cosine")
    both.update(*first)
    both.update(*second)
    torch.testing.assert_close(metric.compute(), both.compute())
