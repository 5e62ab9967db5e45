import math

import numpy as np
import pytest
import torch

from lightning_spectral._checks import all_finite
from lightning_spectral.kernels import CosineMap, GaussianRFF, gaussian_kernel, median_bandwidth


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_have_unit_norm_and_width_2r(dtype):
    rff = GaussianRFF(in_features=5, n_frequencies=37, sigma=0.7, seed=3)
    phi = rff(10 * torch.randn(200, 5, dtype=dtype))
    assert phi.shape == (200, 74)
    assert phi.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    torch.testing.assert_close(phi.norm(dim=1), torch.ones(200, dtype=dtype), atol=tol, rtol=0)


def test_layout_is_cos_block_then_sin_block():
    rff = GaussianRFF(3, 4, sigma=2.0)
    x = torch.randn(6, 3, dtype=torch.float64)
    phases = x @ rff.omega
    expected = torch.cat([phases.cos(), phases.sin()], dim=1) / 2.0
    torch.testing.assert_close(rff(x), expected)


def test_frequencies_are_seeded_float64_buffers_in_state_dict():
    a, b, c = GaussianRFF(8, 16, 1.0, seed=1), GaussianRFF(8, 16, 1.0, seed=1), GaussianRFF(8, 16, 1.0, seed=2)
    assert a.omega.dtype == torch.float64
    assert torch.equal(a.omega, b.omega)
    assert not torch.allclose(a.omega, c.omega)
    assert "omega" in a.state_dict()
    # the global RNG plays no part
    torch.manual_seed(123)
    assert torch.equal(GaussianRFF(8, 16, 1.0, seed=1).omega, a.omega)


def test_frequency_scale_is_one_over_sigma():
    rff = GaussianRFF(50, 4000, sigma=4.0, seed=0)
    assert abs(float(rff.omega.std()) - 0.25) < 0.005
    # scaling sigma by c scales the same standard-normal draws by 1/c
    torch.testing.assert_close(GaussianRFF(50, 4000, sigma=8.0, seed=0).omega * 2, rff.omega)


def test_dtype_cast_of_parent_keeps_exact_frequencies():
    rff = GaussianRFF(4, 8, sigma=1.0, seed=5)
    expected = rff.omega.clone()
    parent = torch.nn.Sequential(rff).half()
    assert parent[0].omega.dtype == torch.float64
    assert torch.equal(parent[0].omega, expected)
    parent.to(torch.bfloat16)
    assert torch.equal(parent[0].omega, expected)


def test_half_precision_input_is_upcast_to_float32():
    rff = GaussianRFF(4, 8, sigma=1.0)
    x = torch.randn(10, 4)
    out = rff(x.half())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, rff(x.half().float()))


def test_kernel_is_approximated_without_bias_and_error_shrinks_like_inverse_sqrt_r():
    torch.manual_seed(0)
    x = torch.randn(40, 6, dtype=torch.float64)
    exact = gaussian_kernel(x, sigma=2.0)
    errors = {}
    for r in (64, 256, 1024, 4096):
        max_errors = []
        for seed in range(6):
            phi = GaussianRFF(6, r, sigma=2.0, seed=seed)(x)
            max_errors.append(float((phi @ phi.T - exact).abs().max()))
        errors[r] = float(np.mean(max_errors))
    scaled = [errors[r] * math.sqrt(r) for r in errors]
    # error * sqrt(r) stays flat (within a factor 2) while r grows 64x
    assert max(scaled) / min(scaled) < 2.0, errors
    assert errors[4096] < errors[64] / 4
    # unbiased: the average over many draws approaches the kernel faster than one draw
    mean_gram = sum(GaussianRFF(6, 64, 2.0, seed=s)(x) @ GaussianRFF(6, 64, 2.0, seed=s)(x).T for s in range(200)) / 200
    assert float((mean_gram - exact).abs().max()) < errors[64] / 3


def test_gaussian_kernel_matches_formula():
    x, y = torch.randn(5, 3), torch.randn(4, 3)
    expected = torch.exp(-((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).double() / (2 * 1.5**2))
    torch.testing.assert_close(gaussian_kernel(x, y, sigma=1.5), expected)
    torch.testing.assert_close(torch.diagonal(gaussian_kernel(x, sigma=1.5)), torch.ones(5, dtype=torch.float64))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(in_features=3, n_frequencies=4, sigma=0.0), "sigma"),
        (dict(in_features=3, n_frequencies=4, sigma=-1.0), "sigma"),
        (dict(in_features=3, n_frequencies=4, sigma=float("nan")), "sigma"),
        (dict(in_features=3, n_frequencies=0, sigma=1.0), "n_frequencies"),
        (dict(in_features=0, n_frequencies=4, sigma=1.0), "in_features"),
        (dict(in_features=3, n_frequencies=2.5, sigma=1.0), "n_frequencies"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GaussianRFF(**kwargs)


@pytest.mark.parametrize(
    "x, error, match",
    [
        (torch.randn(3, 4), ValueError, "width 4 but 3"),
        (torch.randn(3), ValueError, r"shape \(N, d\)"),
        (torch.randn(2, 3, 3), ValueError, "flatten"),
        (torch.tensor([[0.0, float("nan"), 1.0]]), ValueError, "NaN or Inf in 1 of 1 rows"),
        (torch.tensor([[0.0, float("inf"), 1.0]]), ValueError, "NaN or Inf"),
        (torch.ones(2, 3, dtype=torch.long), TypeError, "floating point"),
    ],
)
def test_bad_inputs_raise_clear_errors(x, error, match):
    with pytest.raises(error, match=match):
        GaussianRFF(3, 4, sigma=1.0)(x)


def test_empty_batch_gives_empty_features():
    assert GaussianRFF(3, 4, sigma=1.0)(torch.empty(0, 3)).shape == (0, 8)


def test_cosine_map_normalises_and_rejects_zero_rows():
    x = torch.randn(20, 7)
    out = CosineMap()(x)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(20))
    torch.testing.assert_close(out * x.norm(dim=1, keepdim=True), x)
    with pytest.raises(ValueError, match="1 of 3 rows have norm"):
        CosineMap()(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))


def test_median_bandwidth_is_the_median_pairwise_distance():
    x = torch.randn(301, 4, dtype=torch.float64)
    dists = torch.cdist(x, x)[torch.triu(torch.ones(301, 301, dtype=torch.bool), 1)]
    assert median_bandwidth(x, max_samples=1000) == pytest.approx(float(np.median(dists.numpy())), rel=1e-2)
    # subsampling is seeded and close to the full answer
    assert median_bandwidth(x, max_samples=150, seed=1) == median_bandwidth(x, max_samples=150, seed=1)
    assert median_bandwidth(x, max_samples=150) == pytest.approx(median_bandwidth(x), rel=0.15)
    # scales with the data
    assert median_bandwidth(3 * x) == pytest.approx(3 * median_bandwidth(x))


def test_median_bandwidth_errors():
    with pytest.raises(ValueError, match="at least 2"):
        median_bandwidth(torch.ones(1, 3))
    with pytest.raises(ValueError, match="identical"):
        median_bandwidth(torch.ones(5, 3))


def test_finite_check_accepts_huge_finite_values_and_finds_every_nan_and_inf():
    from lightning_spectral._checks import check_features

    big = torch.full((2, 3), 3e38)  # finite entries whose sum overflows: the fast path must fall back, not raise
    assert torch.equal(check_features(big, "x"), big)
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.zeros(4, 3)
        x[2, 1] = bad
        with pytest.raises(ValueError, match="NaN or Inf in 1 of 4 rows"):
            check_features(x, "x")
    x = torch.zeros(4, 3)
    x[0, 0], x[3, 2] = float("inf"), -float("inf")  # opposite infinities: the sum is NaN
    with pytest.raises(ValueError, match="NaN or Inf in 2 of 4 rows"):
        check_features(x, "x")


def test_cosine_map_gradient_is_the_one_of_x_over_its_norm():
    """The closed-form backward (g - y (y . g)) / ||x|| against autograd through the plain formula and gradcheck."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(30, 7, generator=g, dtype=torch.float64) * torch.logspace(-3, 3, 30, dtype=torch.float64)[:, None])
    weights = torch.randn(30, 7, generator=g, dtype=torch.float64)
    ours = x.clone().requires_grad_(True)
    (CosineMap()(ours) * weights).sum().backward()
    plain = x.clone().requires_grad_(True)
    (plain / plain.norm(dim=1, keepdim=True) * weights).sum().backward()
    torch.testing.assert_close(ours.grad, plain.grad, rtol=1e-12, atol=0.0)
    assert torch.autograd.gradcheck(CosineMap(), (x[:5].clone().requires_grad_(True),))
    huge = (torch.randn(4, 6, generator=g) * 1e30).requires_grad_(True)  # ||x||^2 overflows float32
    CosineMap()(huge).sum().backward()
    assert all_finite(huge.grad) and float(huge.grad.abs().max()) < 1e-28


def test_cosine_map_rows_beyond_the_squares_range_take_the_scaled_path():
    """Squared norms that overflow (1e20 in float32) or underflow (1e-20 with eps lowered) still give unit rows."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 9, generator=g)
    for factor in (1e20, 1e-20, 1e36):
        rows = CosineMap(eps=1e-30)(x * factor)
        torch.testing.assert_close(rows, CosineMap()(x), rtol=1e-5, atol=1e-6)
    mixed = torch.cat([x[:3], x[3:] * 1e25])  # one scaled pass for all rows
    torch.testing.assert_close(CosineMap()(mixed), CosineMap()(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e38, 1e155, 1e300])
def test_exact_kernel_and_median_bandwidth_are_scale_equivariant_at_any_magnitude(scale):
    # torch.cdist squares the entries (inf - inf = NaN near 1e155, 0 below 1e-155): the distances are taken on
    # rows divided by their largest magnitude, so the kernel only sees x / sigma
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 3, generator=g, dtype=torch.float64), torch.randn(30, 3, generator=g, dtype=torch.float64)
    oracle = gaussian_kernel(x, y, sigma=1.3)
    torch.testing.assert_close(gaussian_kernel(x * scale, y * scale, sigma=1.3 * scale), oracle, rtol=1e-12, atol=1e-14)
    assert median_bandwidth(x * scale) == pytest.approx(median_bandwidth(x) * scale, rel=1e-12)
    far = gaussian_kernel(x * scale, sigma=1.0)  # no NaN either way: 0 off the diagonal for huge scales, 1 on it
    assert all_finite(far) and torch.equal(far.diagonal(), torch.ones(40, dtype=torch.float64))


def test_frequency_draws_that_cannot_fit_are_refused_before_allocating():
    with pytest.raises(ValueError, match=r"`in_features`=1000000000 needs .* GiB .*bytes.*projection"):
        GaussianRFF(10**9, 8, 1.0)
    with pytest.raises(ValueError, match=r"`n_frequencies`=1000000000 needs .* GiB"):
        GaussianRFF(3, 10**9, 1.0)
