"""The diversity loss and the guidance step (`functional.diversity`) against the exact n x n kernel formula, and the
running covariance they compare a batch with (`functional.running_covariance`)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_spectral.functional.diversity import diversity_guidance, diversity_loss
from lightning_spectral.functional.running_covariance import RunningCovariance
from lightning_spectral.kernels import CosineMap, GaussianRFF, gaussian_kernel


def exact(x: torch.Tensor, earlier: torch.Tensor, kernel) -> torch.Tensor:
    """log of the mean squared kernel over the pairs (i, j != i) of the batch and (i, earlier k), each counted both
    ways, as an n x (n + m) kernel matrix gives it."""
    n, m = x.shape[0], earlier.shape[0]
    inside, across = kernel(x, x), kernel(x, earlier)
    total = inside.square().sum() - inside.diagonal().square().sum() + 2 * across.square().sum()
    return torch.log(total / (n * (n - 1) + 2 * n * m))


@pytest.mark.parametrize("m", [0, 7])
def test_value_and_gradient_equal_the_n_x_n_formula_on_the_feature_kernel(m):
    g = torch.Generator().manual_seed(0)
    rff = GaussianRFF(3, 16, sigma=1.0, seed=0).double()
    earlier = torch.randn(m, 3, generator=g, dtype=torch.float64)
    running = None
    if m:
        running = RunningCovariance(32, decay=0.0)
        running.update(rff(earlier))
    x = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    got = diversity_loss(rff(x), running)
    (got_grad,) = torch.autograd.grad(got, x)
    want = exact(x, earlier, lambda a, b: rff(a) @ rff(b).T)
    (want_grad,) = torch.autograd.grad(want, x)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-13)


def test_at_many_frequencies_it_approaches_the_exact_gaussian_kernel_formula():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 2, generator=g, dtype=torch.float64, requires_grad=True)
    rff = GaussianRFF(2, 20_000, sigma=1.5, seed=0).double()
    got = diversity_loss(rff(x))
    want = exact(x, x[:0], lambda a, b: gaussian_kernel(a, b, sigma=1.5))
    (got_grad,), (want_grad,) = torch.autograd.grad(got, x), torch.autograd.grad(want, x)
    assert float(got.detach()) == pytest.approx(float(want.detach()), abs=0.03)
    torch.testing.assert_close(got_grad, want_grad, rtol=0.1, atol=0.02)


def test_the_cosine_kernel_and_a_batch_wider_than_its_features():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64, requires_grad=True)  # n > width: the other Gram
    got = diversity_loss(CosineMap()(x))
    unit = torch.nn.functional.normalize
    want = exact(x, x[:0], lambda a, b: unit(a, dim=1) @ unit(b, dim=1).T)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-12)
    (got_grad,), (want_grad,) = torch.autograd.grad(got, x), torch.autograd.grad(want, x)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("n", [16, 256, 2048])
def test_half_precision_features_give_a_finite_loss_and_gradient_at_any_batch_size(n):
    """float16 features: the gradient's helper product stays in range (it overflowed at n = 128 when the division by
    the total came after it), and the value is the float64 one to float16 rounding."""
    rff = GaussianRFF(2, 32, sigma=1.0, seed=0)
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(5))
    for rows in (x, x[:1].expand(n, 2)):  # spread and collapsed
        features = rff(rows).half().requires_grad_(True)
        got = diversity_loss(features)
        (gradient,) = torch.autograd.grad(got, features)
        reference = features.detach().double().requires_grad_(True)
        want = diversity_loss(reference)
        (want_gradient,) = torch.autograd.grad(want, reference)
        assert bool(torch.isfinite(got)) and bool(torch.isfinite(gradient).all())
        assert float(got) == pytest.approx(float(want), abs=1e-3)
        torch.testing.assert_close(gradient.double(), want_gradient, rtol=0.02, atol=2e-3 / n)


def test_a_collapsed_batch_reads_zero_with_a_finite_gradient_and_spread_batches_read_lower():
    rff = GaussianRFF(2, 64, sigma=1.0, seed=0)
    x = torch.ones(8, 2, requires_grad=True)
    loss = diversity_loss(rff(x))
    (grad,) = torch.autograd.grad(loss, x)
    assert abs(float(loss.detach())) < 1e-6 and bool(torch.isfinite(grad).all())
    spread = diversity_loss(rff(torch.randn(8, 2, generator=torch.Generator().manual_seed(0)) * 3))
    assert float(spread) < -1.0


def test_guidance_moves_samples_apart_and_is_n_times_the_loss_gradient():
    g = torch.Generator().manual_seed(3)
    rff = GaussianRFF(2, 128, sigma=1.0, seed=0).double()
    running = RunningCovariance(256, decay=0.9)
    running.update(rff(torch.randn(50, 2, generator=g, dtype=torch.float64) * 0.3))  # history packed near 0
    x = torch.randn(10, 2, generator=g, dtype=torch.float64) * 0.3
    step = diversity_guidance(x, rff, running)
    leaf = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(diversity_loss(rff(leaf), running), leaf)
    torch.testing.assert_close(step, 10 * grad)
    before, after = diversity_loss(rff(x), running), diversity_loss(rff(x - 0.05 * step), running)
    assert float(after) < float(before)
    assert float((x - 0.05 * step).norm(dim=1).mean()) > float(x.norm(dim=1).mean())  # away from the dense centre


def test_float32_features_read_the_float32_covariance_as_float64_ones_read_the_float64_one():
    """Two losses against one running covariance, an update between them, one backward (gradient accumulation): the
    float32 copy of C is refreshed after the update and no graph holds it, so the float32 values and gradients are
    the float64 ones to float32 rounding."""
    g = torch.Generator().manual_seed(4)
    rff = GaussianRFF(3, 64, sigma=1.0, seed=0)
    batches = [torch.randn(6, 3, generator=g) for _ in range(3)]
    results = []
    for dtype in (torch.float32, torch.float64):
        running, leaves, total = RunningCovariance(128, decay=0.8), [], 0.0
        running.update(rff.to(dtype)(batches[0].to(dtype)))
        for batch in batches[1:]:
            leaf = batch.to(dtype).clone().requires_grad_(True)
            features = rff.to(dtype)(leaf)
            total = total + diversity_loss(features, running)
            running.update(features)
            leaves.append(leaf)
        total.backward()
        results.append((float(total), [leaf.grad.double() for leaf in leaves]))
    (value32, grads32), (value64, grads64) = results
    assert value32 == pytest.approx(value64, rel=1e-5)
    for got, want in zip(grads32, grads64, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_running_covariance_decays_resumes_and_refuses_what_does_not_fit():
    running = RunningCovariance(3, decay=0.5)
    a, b = torch.eye(3)[:1], torch.eye(3)[1:]
    running.update(a)
    running.update(b)
    assert running.weight == pytest.approx(2.5)
    torch.testing.assert_close(running.covariance(), torch.diag(torch.tensor([0.5, 1.0, 1.0])).double() / 2.5)
    saved = running.state_dict()
    resumed = RunningCovariance(3, decay=0.5)
    resumed.load_state_dict(saved)
    torch.testing.assert_close(resumed.covariance(), running.covariance())
    for bad, match in ((RunningCovariance(4, decay=0.5), "width"), (RunningCovariance(3, decay=0.9), "decay")):
        with pytest.raises(ValueError, match=match):
            bad.load_state_dict(saved)
        assert bad.weight == 0.0  # left as it was
    with pytest.raises(ValueError, match="NaN"):
        running.update(torch.full((1, 3), math.nan))
    assert running.weight == pytest.approx(2.5)
    with pytest.raises(ValueError, match="decay"):
        RunningCovariance(3, decay=1.5)


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="two samples"):
        diversity_loss(torch.ones(1, 4))
    with pytest.raises(ValueError, match="wide"):
        diversity_loss(torch.ones(3, 4), RunningCovariance(8))
    with pytest.raises(ValueError, match="NaN"):
        diversity_loss(torch.full((3, 4), math.nan))
    running = RunningCovariance(4, decay=0.0)
    running.update(torch.eye(4))
    assert torch.isfinite(diversity_loss(torch.eye(4)[:1], running))  # one row against earlier samples
