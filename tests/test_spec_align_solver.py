"""SpecAlignSolver against its oracle, the exact ``spec_align_loss``: value and gradient over consecutive batches."""

import pytest
import torch

from lightning_spectral.callbacks import SpecAlignSolver
from lightning_spectral.functional.spec import spec_align_loss
from lightning_spectral.kernels import PairedFeatureMap


def batches(n, d_student, d_reference, steps, seed=0, dtype=torch.float64):
    """Consecutive batches of different samples: a fixed random MLP 'student' and a fixed nonlinear reference."""
    g = torch.Generator().manual_seed(seed)
    w_in = torch.randn(16, 32, generator=g, dtype=dtype)
    w_student = torch.randn(32, d_student, generator=g, dtype=dtype) / 4
    w_reference = torch.randn(16, d_reference, generator=g, dtype=dtype)
    for _ in range(steps):
        x = torch.randn(n, 16, generator=g, dtype=dtype)
        student = torch.nn.functional.gelu(x @ w_in) @ w_student
        reference = torch.tanh(x @ w_reference) + 0.3 * torch.randn(n, d_reference, generator=g, dtype=dtype)
        yield student, reference


def loss_and_grad(penalty, student, reference):
    student = student.clone().requires_grad_(True)
    loss = penalty(student, reference)
    loss.backward()
    return loss.detach(), student.grad


CASES = [  # kernel, n, d_student, d_reference: n < D and n > D for each kernel (D = 2r = 64 per side for RFF)
    ("cosine", 64, 48, 40),
    ("cosine", 200, 12, 20),
    ("gaussian", 80, 6, 5),
    ("gaussian", 300, 6, 5),
]


@pytest.mark.parametrize("kernel, n, d_student, d_reference", CASES)
def test_solver_matches_the_exact_route_over_consecutive_batches(kernel, n, d_student, d_reference):
    sigma = 3.0 if kernel == "gaussian" else None
    solver = SpecAlignSolver(kernel, sigma, sigma, n_frequencies=32, seed=3)
    exact_map = PairedFeatureMap(kernel, (d_student, d_reference), (sigma, sigma), 32, 3)
    for student, reference in batches(n, d_student, d_reference, steps=6, seed=n):
        loss, grad = loss_and_grad(solver, student, reference)
        exact_loss, exact_grad = loss_and_grad(
            lambda s, r: spec_align_loss(s, r, feature_map=exact_map), student, reference
        )
        torch.testing.assert_close(loss, exact_loss, rtol=1e-6, atol=1e-12)
        torch.testing.assert_close(grad, exact_grad, rtol=1e-6, atol=1e-6 * float(exact_grad.abs().max()))
    assert solver.fallbacks == 0  # the solver, not its fallback, answered


def test_float32_student_matches_to_float32_rounding():
    solver = SpecAlignSolver("cosine")
    for student, reference in batches(128, 64, 96, steps=3, dtype=torch.float32):
        loss, grad = loss_and_grad(solver, student, reference)
        exact_loss, exact_grad = loss_and_grad(spec_align_loss, student, reference)
        assert loss.dtype == torch.float32
        torch.testing.assert_close(loss, exact_loss, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(grad, exact_grad, rtol=1e-4, atol=1e-4 * float(exact_grad.abs().max()))


def test_near_tie_and_identical_embeddings_fall_back_to_the_exact_route():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g, dtype=torch.float64)
    solver = SpecAlignSolver("cosine")
    loss, grad = loss_and_grad(solver, x, x)  # Lambda = 0: no gap, no winner
    assert solver.fallbacks == 1 and float(loss) == pytest.approx(0.0, abs=1e-12)
    # lambda_+ = -lambda_- exactly: two orthogonal directions swapped between the embeddings
    a = torch.zeros(40, 2, dtype=torch.float64)
    a[:20, 0], a[20:, 1] = 1.0, 1.0
    b = a.flip(1).clone()
    b[:10] = a[:10]
    b[20:30] = a[20:30]
    loss, grad = loss_and_grad(solver, a, b)
    exact_loss, exact_grad = loss_and_grad(spec_align_loss, a, b)
    torch.testing.assert_close(loss, exact_loss)
    assert solver.fallbacks == 2


def test_state_dict_round_trip_repeats_the_same_iterates():
    stream = list(batches(64, 48, 40, steps=4, seed=1))
    first = SpecAlignSolver("cosine")
    for student, reference in stream[:3]:
        first(student, reference)
    resumed = SpecAlignSolver("cosine")
    resumed.load_state_dict(first.state_dict())
    assert resumed.warm_start.shape == (88, 2)  # feature space (48 + 40), one vector per end (block 2)
    fresh = SpecAlignSolver("cosine")  # no warm start: a different path to the same answer (within tol)
    a, b = loss_and_grad(first, *stream[3]), loss_and_grad(resumed, *stream[3])
    c = loss_and_grad(fresh, *stream[3])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert first.last_cycles == resumed.last_cycles <= fresh.last_cycles
    torch.testing.assert_close(c[1], a[1], rtol=1e-6, atol=1e-6 * float(a[1].abs().max()))


def test_warm_start_is_dropped_when_the_widths_change():
    solver = SpecAlignSolver("cosine")
    solver(*next(batches(64, 48, 40, steps=1)))
    assert solver.warm_start.shape[0] == 88
    student, reference = next(batches(64, 10, 40, steps=1))
    loss, _ = loss_and_grad(solver, student, reference)
    torch.testing.assert_close(loss, spec_align_loss(student, reference), rtol=1e-6, atol=1e-12)
    assert solver.warm_start.shape[0] == 50


def test_solver_bad_arguments_raise():
    with pytest.raises(ValueError, match="tol"):
        SpecAlignSolver(tol=0.0)
    with pytest.raises(ValueError, match="block"):
        SpecAlignSolver(block=1)
    with pytest.raises(ValueError, match="max_cycles"):
        SpecAlignSolver(max_cycles=0)
    with pytest.raises(ValueError, match="steps"):
        SpecAlignSolver(steps=0)
    with pytest.raises(ValueError, match="batch is empty"):
        SpecAlignSolver()(torch.randn(0, 3), torch.randn(0, 2))
    for bad in (10**9, 1.5, True):
        with pytest.raises(ValueError, match="steps"):
            SpecAlignSolver(steps=bad)
    for bad in (None, "abc", float("nan"), True, 1.5):
        with pytest.raises(ValueError, match="seed"):
            SpecAlignSolver(seed=bad)
    with pytest.raises(ValueError, match="n_frequencies.*GiB"):
        SpecAlignSolver(kernel="gaussian", sigma_student=1.0, sigma_reference=1.0, n_frequencies=10**12)
    with pytest.raises(ValueError, match="kernel"):
        SpecAlignSolver(kernel="linear")
    with pytest.raises(ValueError, match="warm_start"):
        SpecAlignSolver().load_state_dict({"warm_start": torch.full((8, 2), float("nan"))})
    with pytest.raises(ValueError, match="SAME samples"):
        SpecAlignSolver()(torch.randn(5, 3), torch.randn(4, 2))


@pytest.mark.parametrize("kernel, d_student, d_reference", [("cosine", 48, 40), ("gaussian", 6, 5)])
def test_every_batch_size_from_one_row_gives_the_exact_value_and_gradient(kernel, d_student, d_reference):
    """An epoch's last batch can hold any number of rows: 1 to 64, through one solver (its warm start carried
    across sizes), against the exact route; batches up to the Krylov space's size take the exact route."""
    sigma = 3.0 if kernel == "gaussian" else None
    solver = SpecAlignSolver(kernel, sigma, sigma, n_frequencies=32, seed=3)
    exact_map = PairedFeatureMap(kernel, (d_student, d_reference), (sigma, sigma), 32, 3)
    for n in range(1, 65):
        student, reference = next(batches(n, d_student, d_reference, steps=1, seed=n))
        loss, grad = loss_and_grad(solver, student, reference)
        exact_loss, exact_grad = loss_and_grad(
            lambda s, r: spec_align_loss(s, r, feature_map=exact_map), student, reference
        )
        torch.testing.assert_close(loss, exact_loss, rtol=1e-6, atol=1e-12)
        torch.testing.assert_close(grad, exact_grad, rtol=1e-6, atol=1e-6 * float(exact_grad.abs().max()) + 1e-12)
        if n == 1:  # one sample: both kernel matrices are [1], so SPEC-diff and its gradient vanish
            assert float(loss) == pytest.approx(0.0, abs=1e-12) and float(grad.abs().max()) < 1e-9
    assert solver.small_batches == solver.krylov_size == 10
