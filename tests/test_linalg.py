import math

import pytest
import torch

from lightning_spectral.algebra import (
    add_covariance_,
    add_feature_sums_,
    add_gram_,
    eigen_dtype,
    eigenvalues_above,
    extreme_eigenpairs,
    extreme_eigenvalues,
    jittered_cholesky,
    psd_eigenvalues,
    symmetric_eigh,
    symmetrize,
    top_eigenvalue,
    weighted_sum,
)
from lightning_spectral.algebra.eigen import _lanczos
from lightning_spectral.functional.fkea import renyi_entropy, rke_from_covariance, vendi_score
from lightning_spectral.functional.spec import differential_eigh, differential_theta
from lightning_spectral.kernels import GaussianRFF, gaussian_kernel

ORDERS = [0.5, 1.0, 1.5, 2.0, 3.0, math.inf]


def relative_error(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("width, tile", [(7, 3), (64, 16), (100, 1024), (33, 32)])
def test_tiled_gram_equals_full_product(width, tile):
    phi = torch.randn(50, width, dtype=torch.float64)
    total = torch.zeros(width, width, dtype=torch.float64)
    add_gram_(total, phi, tile=tile)
    torch.testing.assert_close(total, phi.T @ phi)
    torch.testing.assert_close(total, total.T, rtol=1e-14, atol=1e-12)


def test_gram_adds_float32_chunks_into_float64_total():
    phi = torch.randn(10, 6)
    total = torch.ones(6, 6, dtype=torch.float64)
    add_gram_(total, phi, tile=4)
    assert total.dtype == torch.float64
    torch.testing.assert_close(total, 1 + (phi.T @ phi).double(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="expected"):
        add_gram_(torch.zeros(5, 5, dtype=torch.float64), phi)


def covariance(x, rff, chunk_size):
    total = torch.zeros(rff.out_features, rff.out_features, dtype=torch.float64)
    return add_covariance_(total, x, rff, chunk_size=chunk_size)


def test_covariance_has_trace_n_and_matches_explicit_features():
    rff = GaussianRFF(4, 50, sigma=1.5)
    x = torch.randn(300, 4, dtype=torch.float64)
    total = covariance(x, rff, chunk_size=64)
    phi = rff(x)
    torch.testing.assert_close(total, phi.T @ phi)
    assert float(total.trace()) == pytest.approx(300, rel=1e-12)


def test_streaming_equals_one_shot_for_any_chunking_and_order_float64():
    rff = GaussianRFF(6, 300, sigma=2.0)
    x = 3 * torch.randn(1000, 6, dtype=torch.float64)
    one_shot = covariance(x, rff, chunk_size=10_000)
    for chunk in (1, 7, 128, 999):
        assert relative_error(covariance(x, rff, chunk), one_shot) < 1e-10
    shuffled = x[torch.randperm(1000)]
    assert relative_error(covariance(shuffled, rff, 37), one_shot) < 1e-10
    # batches fed one by one into one running total (how metrics stream) give the same matrix too
    total = torch.zeros_like(one_shot)
    for batch in torch.split(shuffled, 113):
        add_covariance_(total, batch, rff, chunk_size=50)
    assert relative_error(total, one_shot) < 1e-10


def test_streaming_float32_stays_within_float32_rounding():
    rff = GaussianRFF(6, 300, sigma=2.0)
    x = 3 * torch.randn(1000, 6)
    one_shot = covariance(x.double(), rff, 10_000)
    assert relative_error(covariance(x, rff, 1000), one_shot) < 1e-5
    assert relative_error(covariance(x, rff, 17), one_shot) < 1e-5


def test_feature_sum_is_accumulated_alongside():
    rff = GaussianRFF(3, 20, sigma=1.0)
    x = torch.randn(90, 3, dtype=torch.float64)
    total = torch.zeros(40, 40, dtype=torch.float64)
    feature_sum = torch.zeros(40, dtype=torch.float64)
    add_covariance_(total, x, rff, chunk_size=16, feature_sum=feature_sum)
    torch.testing.assert_close(feature_sum, rff(x).sum(0))


def test_covariance_spectrum_is_a_probability_vector_and_matches_the_kernel_matrix():
    rff = GaussianRFF(5, 100, sigma=1.0)
    x = torch.randn(80, 5, dtype=torch.float64)
    cov = covariance(x, rff, 32) / 80
    values = psd_eigenvalues(cov)
    assert float(values.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float(values.min()) >= 0
    # non-zero eigenvalues of Phi^T Phi / n equal those of Phi Phi^T / n
    phi = rff(x)
    gram_values = psd_eigenvalues(phi @ phi.T / 80)
    torch.testing.assert_close(values[:80], gram_values, atol=1e-12, rtol=0)
    # eigenvector map: u = Phi v / sqrt(n lambda) is a unit eigenvector of K~/n
    lam, vec = symmetric_eigh(cov)
    u = phi @ vec[:, 0] / math.sqrt(80 * float(lam[0]))
    torch.testing.assert_close(u.norm(), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(phi @ phi.T / 80 @ u, lam[0] * u)


def test_psd_eigenvalues_clamps_round_off_and_rejects_real_negatives():
    q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    tiny = q @ torch.diag(torch.tensor([0.5, 0.3, 0.2, 0.0, -1e-9], dtype=torch.float64)) @ q.T
    values = psd_eigenvalues(tiny)
    assert float(values.min()) == 0.0
    torch.testing.assert_close(values[:3], torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))
    indefinite = q @ torch.diag(torch.tensor([0.5, 0.3, 0.2, 0.0, -1e-2], dtype=torch.float64)) @ q.T
    with pytest.raises(ValueError, match="not positive semi-definite"):
        psd_eigenvalues(indefinite)
    with pytest.raises(ValueError, match="NaN"):
        psd_eigenvalues(torch.full((2, 2), float("nan")))


@pytest.mark.parametrize("alpha", ORDERS + ["inf"])
def test_uniform_and_point_mass_spectra(alpha):
    assert float(vendi_score(torch.full((7,), 1 / 7), alpha)) == pytest.approx(7.0, rel=1e-12)
    assert float(vendi_score(torch.tensor([1.0, 0.0, 0.0]), alpha)) == pytest.approx(1.0, abs=1e-12)
    # zero padding changes nothing, nor does an overall scale
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    padded = torch.cat([p, torch.zeros(10, dtype=torch.float64)])
    assert float(renyi_entropy(padded, alpha)) == pytest.approx(float(renyi_entropy(3 * p, alpha)), rel=1e-12)


def test_special_orders_match_their_closed_forms():
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    shannon = -(p * p.log()).sum()
    assert float(renyi_entropy(p, 1)) == pytest.approx(float(shannon), rel=1e-14)
    # alpha = 1 is the limit of the general formula
    assert float(renyi_entropy(p, 1 + 1e-7)) == pytest.approx(float(shannon), rel=1e-6)
    assert float(renyi_entropy(p, 1 - 1e-7)) == pytest.approx(float(shannon), rel=1e-6)
    assert float(vendi_score(p, 2)) == pytest.approx(1 / 0.3, rel=1e-14)
    assert float(vendi_score(p, math.inf)) == pytest.approx(2.5, rel=1e-14)
    assert float(vendi_score(p, "inf")) == float(vendi_score(p, math.inf))
    assert float(vendi_score(p, 200.0)) == pytest.approx(2.5, rel=0.01)


def test_vendi_is_non_increasing_in_alpha_and_bounded_by_rank():
    p = torch.distributions.Dirichlet(torch.ones(30, dtype=torch.float64)).sample()
    scores = [float(vendi_score(p, a)) for a in [0.25] + ORDERS]
    assert all(a >= b - 1e-12 for a, b in zip(scores, scores[1:], strict=False))
    assert 1 <= scores[-1] and scores[0] <= 30


def test_rke_without_eigendecomposition_equals_spectral_rke():
    x = torch.randn(200, 4, dtype=torch.float64)
    rff = GaussianRFF(4, 64, sigma=1.0)
    cov = covariance(x, rff, 64) / 200
    assert float(rke_from_covariance(cov)) == pytest.approx(float(vendi_score(psd_eigenvalues(cov), 2)), rel=1e-10)
    # exact: RKE = 1 / mean_ij k_ij^2 = exp(H_2(K/n))
    k = gaussian_kernel(x, sigma=1.0)
    assert float(1 / k.square().mean()) == pytest.approx(float(vendi_score(psd_eigenvalues(k / 200), 2)), rel=1e-10)


def test_identical_samples_score_one():
    rff = GaussianRFF(3, 32, sigma=1.0)
    cov = covariance(torch.ones(50, 3, dtype=torch.float64), rff, 16) / 50
    for alpha in ORDERS:
        # orders < 1 amplify the ~1e-16 round-off eigenvalues (documented), orders >= 1 do not
        tolerance = 1e-5 if alpha < 1 else 1e-9
        assert float(vendi_score(psd_eigenvalues(cov), alpha)) == pytest.approx(1.0, abs=tolerance)


@pytest.mark.parametrize("alpha", [0, -1, "two", float("nan")])
def test_bad_orders_raise(alpha):
    with pytest.raises(ValueError, match="alpha"):
        renyi_entropy(torch.tensor([0.5, 0.5]), alpha)


def test_bad_spectra_raise():
    with pytest.raises(ValueError, match="non-negative"):
        renyi_entropy(torch.tensor([0.5, -0.1]))
    with pytest.raises(ValueError, match="all eigenvalues are zero"):
        renyi_entropy(torch.zeros(3))
    with pytest.raises(ValueError, match="zero or non-finite"):
        rke_from_covariance(torch.zeros(3, 3))


def split_covariances(n=3000, width=256, seed=0):
    """Two RFF covariances of disjoint halves of one 8-mode mixture: a dense spectrum near the top of C_A - C_B."""
    g = torch.Generator().manual_seed(seed)
    means = 3 * torch.randn(8, 16, generator=g, dtype=torch.float64)
    x = means[torch.randint(8, (n,), generator=g)] + torch.randn(n, 16, generator=g, dtype=torch.float64)
    rff = GaussianRFF(16, width, sigma=4.0, seed=seed)
    return covariance(x[0::2], rff, 512) / (n // 2), covariance(x[1::2], rff, 512) / (n // 2)


@pytest.mark.parametrize("rho", [1.0, 2.0])
def test_lanczos_extremes_match_eigvalsh_without_falling_back(rho, monkeypatch):
    cov_a, cov_b = split_covariances()
    matrix = cov_a - rho * cov_b
    exact = torch.linalg.eigvalsh(matrix)
    norm = float(exact.abs().max())

    def no_dense(*args, **kwargs):
        raise AssertionError("fell back to eigvalsh")

    monkeypatch.setattr(torch.linalg, "eigvalsh", no_dense)
    low, high = extreme_eigenvalues(matrix)
    assert abs(float(high - exact[-1])) <= 1e-10 * norm and abs(float(low - exact[0])) <= 1e-10 * norm
    assert abs(float(top_eigenvalue(matrix) - exact[-1])) <= 1e-10 * norm
    # identical input, identical output (fixed start vector)
    assert float(top_eigenvalue(matrix.clone())) == float(top_eigenvalue(matrix))


def test_lanczos_on_a_symmetric_input_skips_the_symmetrisation_and_answers_alike(monkeypatch):
    cov_a, cov_b = split_covariances(seed=1)
    matrix = weighted_sum([(1.0, cov_a), (-1.0, cov_b)])
    assert torch.equal(matrix, matrix.T)  # sums of exactly symmetric covariances stay exactly symmetric
    expected = [float(v) for v in extreme_eigenvalues(matrix)]

    def no_pass(*args, **kwargs):
        raise AssertionError("symmetrised a matrix declared symmetric")

    monkeypatch.setattr("lightning_spectral.algebra.symmetrize", no_pass)
    found = [float(v) for v in extreme_eigenvalues(matrix, symmetric=True)]
    assert found == pytest.approx(expected, rel=1e-12)
    assert float(top_eigenvalue(matrix, symmetric=True)) == pytest.approx(expected[1], rel=1e-12)


@pytest.mark.parametrize("rows", [1, 7, 64, 1000])
def test_weighted_sum_equals_the_whole_tensor_expression(rows):
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(50, 30, generator=g, dtype=torch.float64) for _ in range(3))
    expected = 0.5 * a - 2.0 * b + 3.0 * c
    found = weighted_sum([(0.5, a), (-2.0, b), (3.0, c)], rows=rows)
    torch.testing.assert_close(found, expected, rtol=1e-14, atol=1e-14)
    as_float = weighted_sum([(0.5, a), (-2.0, b)], dtype=torch.float32, rows=rows)
    assert as_float.dtype == torch.float32
    torch.testing.assert_close(as_float, (0.5 * a - 2.0 * b).float(), rtol=1e-6, atol=1e-6)
    assert torch.equal(weighted_sum([(1.0, a)], rows=rows), a)


def test_lanczos_on_a_top_cluster_falls_back_to_the_dense_answer():
    q, _ = torch.linalg.qr(torch.randn(200, 200, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    values = torch.cat([torch.linspace(-1.0, 0.0, 190, dtype=torch.float64), 0.5 + 1e-9 * torch.arange(10.0).double()])
    matrix = q @ torch.diag(values) @ q.T
    assert _lanczos(matrix, 6, 1e-10, 0, (-1,), vectors=False) is None  # 6 steps cannot resolve a cluster of width 1e-8
    dense = float(torch.linalg.eigvalsh((matrix + matrix.T) / 2)[-1])
    assert float(top_eigenvalue(matrix, max_steps=6)) == dense
    assert float(top_eigenvalue(matrix)) == pytest.approx(0.5 + 9e-9, abs=1e-10)  # the default budget suffices


def test_lanczos_on_tiny_and_low_rank_matrices():
    assert float(top_eigenvalue(torch.tensor([[2.0]]))) == 2.0
    diagonal = torch.diag(torch.tensor([3.0, -1.0, 0.0], dtype=torch.float64))
    assert [float(v) for v in extreme_eigenvalues(diagonal)] == pytest.approx([-1.0, 3.0], abs=1e-14)
    u = torch.randn(100, 2, dtype=torch.float64)  # rank 2: the Krylov space is exhausted after 3 steps
    low, high = extreme_eigenvalues(u[:, :1] @ u[:, :1].T - u[:, 1:] @ u[:, 1:].T)
    exact = torch.linalg.eigvalsh(u[:, :1] @ u[:, :1].T - u[:, 1:] @ u[:, 1:].T)
    assert float(low) == pytest.approx(float(exact[0]), rel=1e-10)
    assert float(high) == pytest.approx(float(exact[-1]), rel=1e-10)


def test_lanczos_bad_input_raises():
    with pytest.raises(ValueError, match="square"):
        top_eigenvalue(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="NaN"):
        top_eigenvalue(torch.full((3, 3), float("nan")))
    with pytest.raises(ValueError, match="which"):
        extreme_eigenvalues(torch.eye(3), which="top")
    with pytest.raises(ValueError, match="rtol"):
        extreme_eigenvalues(torch.eye(3), rtol=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        extreme_eigenvalues(torch.eye(3), max_steps=0)


def test_extreme_eigenpairs_match_eigh():
    cov_a, cov_b = split_covariances(seed=2)
    matrix = cov_a - cov_b
    values, vectors = torch.linalg.eigh(matrix)
    found, ritz = extreme_eigenpairs(matrix, 2, 3)
    keep = [0, 1, -3, -2, -1]
    norm = float(values.abs().max())
    assert float((found - values[keep]).abs().max()) <= 1e-10 * norm
    residual = matrix @ ritz - ritz * found
    assert float(residual.norm(dim=0).max()) <= 1e-10 * norm
    assert torch.allclose(ritz.T @ ritz, torch.eye(5, dtype=torch.float64), atol=1e-10)
    assert extreme_eigenpairs(matrix, 0, 0)[1].shape == (matrix.shape[0], 0)
    with pytest.raises(ValueError, match="n_smallest"):
        extreme_eigenpairs(matrix, -1, 2)


def test_jittered_cholesky_shifts_only_as_much_as_needed():
    x = torch.randn(10, 30, dtype=torch.float64)
    full = x.T @ x + torch.eye(30, dtype=torch.float64)
    factor, eps = jittered_cholesky(full)
    assert eps == pytest.approx(30 * 2.2e-16 * float(full.trace()))
    torch.testing.assert_close(factor @ factor.T, full + eps * torch.eye(30, dtype=torch.float64))
    singular = x.T @ x  # rank 10
    factor, eps = jittered_cholesky(singular)
    torch.testing.assert_close(factor @ factor.T, singular + eps * torch.eye(30, dtype=torch.float64))
    indefinite = full.clone()
    indefinite[0, 0] = -5.0
    with pytest.raises(ValueError, match="not positive semi-definite"):
        jittered_cholesky(indefinite)
    with pytest.raises(ValueError, match="trace"):
        jittered_cholesky(-full)
    with pytest.raises(ValueError, match="NaN"):
        jittered_cholesky(torch.full((2, 2), float("nan")))


def joint_covariance(n, d_a, d_b, seed=0, same=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.nn.functional.normalize(torch.randn(n, d_a, generator=g, dtype=torch.float64), dim=1)
    b = a if same else torch.nn.functional.normalize(
        torch.randn(n, d_b, generator=g, dtype=torch.float64) + a[:, :1], dim=1
    )
    joint = torch.cat([a, b], 1)
    return joint.T @ joint / n


@pytest.mark.parametrize("n", [400, 30])  # full rank, and rank 30 < D = 40
def test_differential_eigh_equals_the_general_eigendecomposition_of_gamma(n):
    cov = joint_covariance(n, 16, 24)
    signs = torch.cat([torch.ones(16), -torch.ones(24)]).double()
    gamma = signs[:, None] * cov
    expected = torch.linalg.eigvals(gamma).real.sort(descending=True).values
    values, vectors = differential_eigh(cov, 16)
    assert float((values - expected).abs().max()) < 1e-12
    big = values.abs() > 1e-9
    assert int(big.sum()) == min(n, 40)
    v = vectors[:, big]
    # eigenvectors of Gamma, scaled so that v^T S v = lambda and v^T C v = lambda^2
    torch.testing.assert_close(gamma @ v, v * values[big], atol=1e-10, rtol=0)
    torch.testing.assert_close((v * (signs[:, None] * v)).sum(0), values[big], atol=1e-12, rtol=0)
    torch.testing.assert_close((v * (cov @ v)).sum(0), values[big].square(), atol=1e-12, rtol=0)


def test_identical_embeddings_give_a_zero_spectrum_despite_the_shift():
    """Gamma has Jordan blocks there: the Cholesky shift alone moves its zeros to +-sqrt(2 p eps), below the floor."""
    cov = joint_covariance(500, 32, 32, same=True)
    theta, factor, signs, floor = differential_theta(cov, 32)
    raw = torch.linalg.eigvalsh(theta).abs().max()
    assert 1e-12 < float(raw) <= floor < 1e-5
    assert float(differential_eigh(cov, 32)[0].abs().max()) == 0.0


def test_near_singular_covariance_keeps_float64_accuracy():
    """Random features of low-dimensional inputs are nearly dependent (C's smallest eigenvalue ~1e-14)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3, generator=g, dtype=torch.float64)
    phi = torch.cat([GaussianRFF(3, 64, 2.0, seed=1)(x), GaussianRFF(3, 64, 2.0, seed=2)(torch.tanh(x))], 1)
    cov = phi.T @ phi / 300
    assert float(torch.linalg.eigvalsh(cov)[0]) < 1e-10
    exact = torch.linalg.eigvalsh((phi[:, :128] @ phi[:, :128].T - phi[:, 128:] @ phi[:, 128:].T) / 300)
    values = differential_eigh(cov, 128)[0].flip(0)  # ascending, as exact
    low, high = int((exact < -1e-4).sum()), int((exact > 1e-4).sum())  # far above the shift's floor (~1e-6)
    assert low >= 3 and high >= 10
    for ends in (slice(0, low), slice(-high, None)):
        assert torch.allclose(values[ends], exact[ends], atol=1e-11, rtol=0)


def test_float32_eigenvalues_keep_vendi_and_rke_within_half_a_percent(monkeypatch):
    """A flat RFF spectrum (modes wide against sigma: hundreds of small eigenvalues), float32 route vs float64."""
    g = torch.Generator().manual_seed(0)
    means = 2 * torch.randn(20, 32, generator=g)
    x = means[torch.randint(20, (3000,), generator=g)] + torch.randn(3000, 32, generator=g)
    cov = covariance(x, GaussianRFF(32, 512, sigma=6.0), 1024) / 3000
    exact, single = psd_eigenvalues(cov), psd_eigenvalues(cov, precision="float32")
    assert float((single - exact).abs().max()) < 1e-6 * float(exact[0])
    for alpha in (1, 2, "inf"):
        assert float(vendi_score(single, alpha)) == pytest.approx(float(vendi_score(exact, alpha)), rel=5e-3)
    assert eigen_dtype("auto", 4095) == torch.float64 and eigen_dtype("auto", 4096) == torch.float32
    with pytest.raises(ValueError, match="precision"):
        psd_eigenvalues(cov, precision="half")


@pytest.mark.parametrize("rho", [1.0, 2.0])
def test_finc_null_draws_by_lanczos_equal_the_dense_eigenvalues(rho):
    """The first user of the Lanczos routines, FINC's significance rule (issue 23): its null draws (Lanczos at
    rho = 1 on 2r = 1280 > 1024, both ends) against dense eigvalsh of the same matrices."""
    import importlib

    finc = importlib.import_module("lightning_spectral.functional.finc_null")
    from lightning_spectral.functional.sampling_noise import Multipliers, NoiseSums
    g = torch.Generator().manual_seed(0)
    means = 3 * torch.randn(8, 16, generator=g, dtype=torch.float64)
    rff = GaussianRFF(16, 640, sigma=4.0, seed=0)
    sides = []
    for multipliers in (Multipliers(3, 4.0, 0), None):  # the draws on the generated side only, as FINC keeps them
        x = means[torch.randint(8, (600,), generator=g)] + torch.randn(600, 16, generator=g, dtype=torch.float64)
        sides.append(NoiseSums.of(x, rff, multipliers))
    null = finc.null_model(*sides, rho)
    matrices = finc.combinations(list(sides[0].sums + sides[1].sums), finc.null_weights(*sides, rho), torch.float64)
    dense = []
    for matrix in matrices:
        values = torch.linalg.eigvalsh(matrix)
        dense += [float(values[-1]), -float(values[0])] if rho == 1.0 else [float(values[-1])]
    # rho != 1: Lanczos stops at a looser residual (SHIFTED_RTOL, 1e-4; measured 5e-6 relative here)
    rtol = 1e-9 if rho == 1.0 else 1e-4
    torch.testing.assert_close(null.draws, torch.tensor(dense, dtype=torch.float64), rtol=rtol, atol=1e-13)




def test_top_eigh_by_lanczos_equals_the_dense_eigh_at_a_width_that_takes_it():
    """At 1,024 rows and 4 pairs `top_eigh` runs Lanczos (the default route there); the exact oracle is the dense
    ``eigh``: the same eigenvalues and, up to sign, the same unit eigenvectors, for a PSD and an indefinite matrix."""
    from lightning_spectral.algebra import top_eigh

    g = torch.Generator().manual_seed(0)
    scales = torch.linspace(3.0, 0.1, 1024, dtype=torch.float64)
    rows = torch.randn(3000, 1024, generator=g, dtype=torch.float64) * scales
    psd = rows.T @ rows / 3000
    other = torch.randn(3000, 1024, generator=g, dtype=torch.float64)
    for matrix in (psd, psd - other.T @ other / 3000):
        values, vectors = top_eigh(matrix, 4)
        want_values, want_vectors = symmetric_eigh(matrix)
        torch.testing.assert_close(values, want_values[:4], rtol=1e-9, atol=0)
        torch.testing.assert_close((vectors * want_vectors[:, :4]).sum(0).abs(), torch.ones(4, dtype=torch.float64))
    dense = top_eigh(psd, 4, partial=False)
    torch.testing.assert_close(dense[0], symmetric_eigh(psd)[0][:4], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_eigenvalues_above_equal_the_top_of_eigvalsh_and_fall_back_on_a_repeated_one(dtype, monkeypatch):
    """Lanczos with the inertia certificate: the eigenvalues above the level (or the top one) equal eigvalsh's, with
    no fallback; a repeated eigenvalue above the level (one start vector finds one copy) fails the certificate and
    the dense eigvalsh answers, so the copy is not lost."""
    import lightning_spectral.algebra.eigen as eigen

    q, _ = torch.linalg.qr(torch.randn(600, 600, generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    calls = []
    dense = torch.linalg.eigvalsh
    monkeypatch.setattr(eigen.torch.linalg, "eigvalsh", lambda m: calls.append(1) or dense(m))
    rtol, atol = (1e-12, 1e-12) if dtype == torch.float64 else (0, 2e-5)
    for top, level, expected in (([0.9, 0.5, 0.3], 0.2, [0.9, 0.5, 0.3]), ([0.9, 0.5, 0.3], 1.0, [0.9])):
        spectrum = torch.cat([torch.tensor(top, dtype=torch.float64), torch.linspace(-1.0, 0.1, 597).double()])
        matrix = symmetrize(q @ torch.diag(spectrum) @ q.T).to(dtype)
        values = eigenvalues_above(matrix, level, rtol=1e-10 if dtype == torch.float64 else 1e-5)
        torch.testing.assert_close(values, torch.tensor(expected, dtype=torch.float64), rtol=rtol, atol=atol)
    assert eigenvalues_above(torch.zeros(600, 600, dtype=dtype), 1e-3).tolist() == [0.0]  # no noise at all
    assert not calls
    repeated = torch.cat([torch.tensor([0.9, 0.5, 0.5]), torch.linspace(-1.0, 0.1, 597)]).double()
    matrix = symmetrize(q @ torch.diag(repeated) @ q.T).to(dtype)
    values = eigenvalues_above(matrix, 0.2, rtol=1e-10 if dtype == torch.float64 else 1e-5)
    assert calls and values.shape == (600,)
    torch.testing.assert_close(values[:3], repeated[:3], rtol=rtol, atol=atol)


def test_psd_eigh_gives_psd_eigenvalues_values_and_their_vectors():
    """Same cleaning as `psd_eigenvalues` (round-off zeroed, descending), and C = U diag(values) U^T to round-off,
    in float64 and float32."""
    from lightning_spectral.algebra import psd_eigenvalues, psd_eigh

    phi = torch.randn(30, 64, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    moment = phi.T @ phi / 30  # rank 30 of 64
    for precision, tolerance in (("float64", 1e-12), ("float32", 1e-5)):
        values, vectors = psd_eigh(moment, precision=precision)
        torch.testing.assert_close(values, psd_eigenvalues(moment, precision=precision), rtol=0, atol=tolerance)
        assert bool((values[30:] == 0).all()) and bool((values[:-1] >= values[1:]).all())
        rebuilt = (vectors.double() * values) @ vectors.double().T
        assert float((rebuilt - moment).abs().max()) < tolerance * float(values[0]) * 10
    with pytest.raises(ValueError, match="psd_eigh: the matrix has NaN"):
        psd_eigh(torch.full((3, 3), float("nan")))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_psd_eigh_with_a_rank_bound_equals_the_dense_route_and_the_n_by_n_oracle(dtype):
    """A second moment of n = 150 rows at D = 1,024 (rows' products in ``dtype``, summed in float64) has rank <= 150:
    `psd_eigh` with ``rank=150`` takes the range finder and gives the dense ``eigh``'s eigenvalues (all D) and the
    non-zero ones of the n x n Gram matrix, with eigenvectors of the same projectors; the rule
    (`use_range_finder`) turns it off without a bound, below `PARTIAL_MIN_SIZE` rows and for a bound near D."""
    from lightning_spectral.algebra import psd_eigh
    from lightning_spectral.algebra.eigen import PARTIAL_MIN_SIZE, RANGE_MAX_SHARE, RANGE_OVERSAMPLE, use_range_finder

    rff = GaussianRFF(3, 512, sigma=1.0, seed=0)
    x = torch.randn(150, 3, generator=torch.Generator().manual_seed(1)) * torch.tensor([1.0, 2.0, 0.5])
    phi = rff(x.to(dtype))
    moment = (phi.T @ phi).double() / 150
    precision = "float64" if dtype == torch.float64 else "float32"
    assert use_range_finder(1024, 150)
    values, vectors = psd_eigh(moment, precision=precision, rank=150)
    dense_values, dense_vectors = psd_eigh(moment, precision=precision)
    oracle = torch.linalg.eigvalsh((phi @ phi.T).double() / 150).flip(0)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-6
    assert vectors.shape == (1024, 150 + RANGE_OVERSAMPLE) and values.shape == (1024,)
    assert float((values[150:]).abs().max()) == 0.0
    torch.testing.assert_close(values, dense_values, rtol=0, atol=tolerance * float(oracle[0]))
    torch.testing.assert_close(values[:150], oracle, rtol=0, atol=tolerance * float(oracle[0]))
    top = 20  # well-separated leading pairs: the same projector u u^T (signs are arbitrary)
    gaps = (oracle[:top] - oracle[1 : top + 1]).abs().min()
    assert float(gaps) > 1e3 * tolerance * float(oracle[0])
    dots = (vectors[:, :top].double() * dense_vectors[:, :top].double()).sum(0).abs()
    atol = 1e-4 if dtype == torch.float32 else 1e-8
    torch.testing.assert_close(dots, torch.ones(top, dtype=torch.float64), rtol=0, atol=atol)
    assert not use_range_finder(1024, None)
    assert not use_range_finder(PARTIAL_MIN_SIZE - 1, 10)
    assert not use_range_finder(1024, int(RANGE_MAX_SHARE * 1024))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_weighted_gram_of_the_upper_tiles_equals_the_explicit_sum(dtype):
    """`add_feature_sums_`'s draws' sums ``S_a += sum_i w_ia phi_i phi_i^T`` through `add_gram_`'s upper tiles,
    mirrored: the explicit float64 sum to the rounding of ``dtype``, exactly symmetric."""
    generator = torch.Generator().manual_seed(3)
    phi = torch.randn(70, 40, generator=generator, dtype=torch.float64)
    weights = torch.randn(70, 3, generator=generator, dtype=torch.float64)
    total = torch.ones(3, 40, 40, dtype=torch.float64)
    add_feature_sums_(phi.to(dtype), weights=weights, weighted=total)
    want = torch.ones(3, 40, 40, dtype=torch.float64) + torch.einsum("ia,ij,ik->ajk", weights, phi, phi)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(total, want, rtol=0, atol=tolerance * float(want.abs().max()))
    assert torch.equal(total, total.transpose(1, 2))
    add_gram_(total[0], phi.to(dtype), tile=16, weights=weights[:, 0])  # tiles smaller than the width
    torch.testing.assert_close(total[0], want[0] + (want[0] - 1), rtol=0, atol=2 * tolerance * float(want.abs().max()))


def test_feature_sums_of_a_chunk_equal_the_explicit_sums():
    """`add_feature_sums_`: ``n``, ``s``, ``Q``, ``w_a``, ``S_a``, ``F_a`` equal their float64 formulas, added to what
    the sums held; bandwidth lanes (B, N, D) and label lanes (rows split by ``lanes``) equal the lanes one by one."""
    generator = torch.Generator().manual_seed(4)
    phi = torch.randn(2, 30, 6, generator=generator, dtype=torch.float64)  # two bandwidth lanes
    weights = torch.randn(30, 3, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 2] * 15)  # lane 1 gets no row

    def sums(lanes):
        lead = (lanes,) if lanes else ()
        shapes = [(), (*lead, 6), (*lead, 6, 6), (*lead, 3), (*lead, 3, 6, 6), (*lead, 3, 6)]
        return [torch.ones(shape, dtype=torch.float64) for shape in shapes]

    def add(phi, totals, **lanes):
        names = ["count", "feature_sum", "outer", "weight_sums", "weighted", "weighted_features"]
        add_feature_sums_(phi, weights=weights, **dict(zip(names, totals)), **lanes)

    def explicit(phi, weights):
        return [
            torch.tensor(1.0 + phi.shape[0], dtype=torch.float64), 1 + phi.sum(0), 1 + phi.T @ phi,
            1 + weights.sum(0), 1 + torch.einsum("ia,ij,ik->ajk", weights, phi, phi), 1 + weights.T @ phi,
        ]

    one = sums(0)
    add(phi[0], one)
    for got, want in zip(one, explicit(phi[0], weights)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    by_bandwidth = sums(2)
    add(phi, by_bandwidth)
    for lane in range(2):
        alone = sums(0)
        add(phi[lane], alone)
        for got, want in zip(by_bandwidth[1:], alone[1:]):
            assert torch.equal(got[lane], want)
    by_label = sums(3)
    add(phi[0], by_label, lanes=labels)
    assert float(by_label[0]) == 31
    for lane in range(3):
        rows = labels == lane
        alone = sums(0)
        if rows.any():
            add_feature_sums_(phi[0][rows], feature_sum=alone[1], outer=alone[2], weights=weights[rows],
                              weight_sums=alone[3], weighted=alone[4], weighted_features=alone[5])
        for got, want in zip(by_label[1:], alone[1:]):
            assert torch.equal(got[lane], want)
    with pytest.raises(ValueError, match="lanes"):
        add_feature_sums_(phi, lanes=labels)


def test_draws_times_vectors_equal_the_formed_draws():
    """`NoiseSums.draws_times` (``E_a V`` from the sums, the draws never formed) equals ``draw(a) @ V``."""
    from lightning_spectral.functional.sampling_noise import Multipliers, NoiseSums

    x = torch.randn(90, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sums = NoiseSums.of(x, GaussianRFF(3, 16, sigma=1.0, seed=0), Multipliers(3, 1.0, 0, 1.0), chunk_size=40)
    vectors = torch.randn(32, 4, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    want = torch.stack([sums.draw(a) @ vectors for a in range(3)])
    torch.testing.assert_close(sums.draws_times(vectors), want, rtol=0, atol=1e-13 * float(want.abs().max()))
    assert sums.draws_times(vectors[:, :0]).shape == (3, 32, 0)


# ---- full float32 precision whatever the user set (issue: GPU precision) ------------------------------------------


@pytest.mark.parametrize("precision", ["medium", "high"])
def test_sums_are_the_same_under_a_lower_matmul_precision_and_the_setting_is_restored(precision):
    """Lightning advises ``set_float32_matmul_precision("high" / "medium")``; on this CPU "medium" runs float32
    products in bfloat16 (a 512 x 512 product moves by ~0.25). The metrics' sums, the functional covariance and the
    mode scores ignore it, and leave the user's setting as it was."""
    from lightning_spectral.algebra import covariance
    from lightning_spectral.functional.modes import mode_scores
    from lightning_spectral.kernels import GaussianRFF
    from lightning_spectral.metrics import FINCNovelty

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(600, 32, generator=g) * 3, torch.randn(500, 32, generator=g) * 3
    rff = GaussianRFF(32, 256, sigma=4.0)
    vectors = torch.linalg.qr(torch.randn(512, 3, generator=g, dtype=torch.float64))[0]

    def read():
        metric = FINCNovelty(4.0, 256)
        metric.update(x, real=True)
        metric.update(y, real=False)
        states = [metric.reading().streams[name].state.clone() for name in ("gen", "ref")]
        return states, covariance(x, rff), mode_scores(y, rff, vectors)

    want = read()
    a = torch.randn(512, 512, generator=g)
    torch.set_float32_matmul_precision(precision)
    try:
        if precision == "medium":
            assert not torch.equal(a @ a, a.double().matmul(a.double()).float())  # the setting is live here
        got = read()
        assert torch.get_float32_matmul_precision() == precision  # given back after every read
    finally:
        torch.set_float32_matmul_precision("highest")
    for w, o in zip(want[0], got[0]):
        assert torch.equal(w, o)
    assert torch.equal(want[1], got[1]) and torch.equal(want[2], got[2])


def test_full_precision_sets_every_backend_to_ieee_and_restores_each():
    from lightning_spectral.algebra import full_precision

    before = (torch.backends.mkldnn.matmul.fp32_precision, torch.backends.cuda.matmul.fp32_precision)
    torch.backends.mkldnn.matmul.fp32_precision, torch.backends.cuda.matmul.fp32_precision = "bf16", "tf32"
    try:
        with full_precision():
            assert torch.backends.mkldnn.matmul.fp32_precision == "ieee"
            assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert (torch.backends.mkldnn.matmul.fp32_precision, torch.backends.cuda.matmul.fp32_precision) == ("bf16", "tf32")
        with pytest.raises(KeyError), full_precision():
            raise KeyError("an error inside the block")
        assert (torch.backends.mkldnn.matmul.fp32_precision, torch.backends.cuda.matmul.fp32_precision) == ("bf16", "tf32")
    finally:
        torch.backends.mkldnn.matmul.fp32_precision, torch.backends.cuda.matmul.fp32_precision = before


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (`make gpu-check`)")
def test_cuda_sums_under_tf32_equal_the_ieee_ones():
    """On a tensor-core GPU "medium" / "high" turn float32 products into TF32 or bfloat16: the sums do not move."""
    from lightning_spectral.metrics import FINCNovelty

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4000, 64, generator=g) * 3, torch.randn(3000, 64, generator=g) * 3

    def states():
        metric = FINCNovelty(4.0, 1024).cuda()
        metric.update(x.cuda(), real=True)
        metric.update(y.cuda(), real=False)
        return [metric.reading().streams[name].state.cpu() for name in ("gen", "ref")]

    want = states()
    torch.set_float32_matmul_precision("medium")
    try:
        got = states()
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")
    for w, o in zip(want, got):
        assert torch.equal(w, o)


def test_a_start_near_the_top_eigenvector_gives_the_same_extreme_eigenvalue_and_bad_ones_are_refused():
    """``near`` (the top eigenvector of a nearby matrix, as `functional.finc.top_bias` passes) changes the start
    only: the largest eigenvalue is the dense one to the residual tolerance, also for a ``near`` far from it."""
    generator = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(600, 600, generator=generator, dtype=torch.float64))
    values = torch.cat([torch.tensor([1.0, 0.98]), torch.linspace(-0.5, 0.9, 598)]).double()
    matrix = q @ torch.diag(values) @ q.T
    nearby = matrix + 0.01 * (lambda e: (e + e.T) / 2)(torch.randn(600, 600, generator=generator).double())
    top = torch.linalg.eigh(nearby)[1][:, -1]
    for near in (top, q[:, 5], None):  # close, orthogonal to the top eigenvector, none
        high = extreme_eigenvalues(matrix, rtol=1e-8, which="largest", near=near)[1]
        assert float(high) == pytest.approx(1.0, abs=1e-6)
    for bad in (torch.zeros(600), torch.ones(5), torch.full((600,), float("nan"))):
        with pytest.raises(ValueError, match="`near` must be a finite, non-zero"):
            extreme_eigenvalues(matrix, near=bad)
