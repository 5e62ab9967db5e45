"""KernelPCAOOD against the explicit and kernel-trick formulas and the properties of the digest (part D.1)."""

import math

import numpy as np
import pytest
import torch

from lightning_spectral.functional import detection_metrics, threshold_at_tpr
from lightning_spectral.metrics import KernelPCAOOD
from lightning_spectral.metrics.kernel_pca_ood import FITTED


def circle_data(seed=0, n_in=3000, n_out=1000, dim=16):
    """Digest D.1.5(b): 6 angular clusters on a great circle of R^16 with random scale; OOD between them."""
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(dim, 2, generator=g, dtype=torch.float64))

    def on_circle(angles):
        scale = 0.5 + 2.5 * torch.rand(len(angles), 1, generator=g, dtype=torch.float64)
        return scale * (torch.stack([angles.cos(), angles.sin()], 1) @ basis.T)

    centres = torch.randint(6, (n_in,), generator=g) * (math.pi / 3)
    inside = on_circle(centres + 0.08 * torch.randn(n_in, generator=g, dtype=torch.float64))
    between = torch.randint(6, (n_out,), generator=g) * (math.pi / 3) + math.pi / 6
    outside = on_circle(between + 0.08 * torch.randn(n_out, generator=g, dtype=torch.float64))
    return inside, outside


def test_corp_separates_the_circle_where_linear_pca_and_cop_do_not():
    inside, outside = circle_data()
    train, test_in = inside[:2000], inside[2000:]
    aurocs = {}
    for mapping in ("corp", "cop", "linear"):
        detector = KernelPCAOOD(mapping, sigma=0.5, n_frequencies=128, explained_variance=0.9).fit(train.split(500))
        metrics = detection_metrics(detector.score(test_in), detector.score(outside))
        aurocs[mapping] = float(metrics["auroc"])
    assert aurocs["corp"] > 0.95, aurocs
    assert aurocs["linear"] < 0.65, aurocs
    assert aurocs["cop"] < 0.65, aurocs  # the normalised data lie exactly on the circle: cosine alone is blind


def explicit_error(phi_train, phi_test, q):
    mean = phi_train.mean(0)
    covariance = (phi_train - mean).T @ (phi_train - mean) / len(phi_train)
    _, vectors = torch.linalg.eigh(covariance)
    vectors = vectors.flip(1)
    residual = phi_test - mean
    projector = vectors[:, :q] @ vectors[:, :q].T
    return (residual - residual @ projector).norm(dim=1), (residual @ vectors[:, q:]).norm(dim=1)


def test_score_is_the_projection_residual_and_matches_the_kernel_trick():
    inside, outside = circle_data(seed=1, n_in=400, n_out=50)
    detector = KernelPCAOOD("corp", sigma=0.7, n_frequencies=40, n_components=7).fit([inside])
    phi_train, phi_test = detector.feature_map(inside).double(), detector.feature_map(outside).double()
    via_projector, via_residual_basis = explicit_error(phi_train, phi_test, 7)
    scores = detector.score(outside)
    torch.testing.assert_close(scores, via_projector, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(scores, via_residual_basis, rtol=1e-8, atol=1e-10)  # Prop. 1
    # Hoffmann's centred kernel-PCA error with k(a, b) = Phi(a) . Phi(b) (the digest's corrected Prop. 2)
    n = len(phi_train)
    k = phi_train @ phi_train.T
    centre = torch.eye(n, dtype=torch.float64) - 1.0 / n
    k_centred = centre @ k @ centre
    values, alphas = torch.linalg.eigh(k_centred)
    values, alphas = values.flip(0)[:7], alphas.flip(1)[:, :7]
    k_test = phi_test @ phi_train.T
    k_test_centred = (k_test - k_test.mean(1, keepdim=True) - k.mean(0) + k.mean()) @ torch.eye(n).double()
    self_term = (phi_test * phi_test).sum(1) - 2 * k_test.mean(1) + k.mean()
    kernel_error = (self_term - ((k_test_centred @ alphas) ** 2 / values).sum(1)).clamp_min(0).sqrt()
    torch.testing.assert_close(scores, kernel_error, rtol=1e-6, atol=1e-8)


def test_error_is_monotone_in_q_and_vanishes_at_full_rank():
    inside, outside = circle_data(seed=2, n_in=300, n_out=20)
    previous = None
    for q in (1, 3, 10, 30, 80):
        scores = KernelPCAOOD("corp", sigma=0.5, n_frequencies=40, n_components=q).fit([inside]).score(outside)
        if previous is not None:
            assert bool((scores <= previous + 1e-10).all())
        previous = scores
    full = KernelPCAOOD("corp", sigma=0.5, n_frequencies=40, n_components=80).fit([inside])
    assert float(full.score(inside[:50]).max()) < 1e-6


def test_explained_variance_rule_keeps_the_smallest_sufficient_q():
    inside, _ = circle_data(seed=3, n_in=500, n_out=1)
    detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64, explained_variance=0.8).fit([inside])
    ratios = detector.eigenvalues_.cumsum(0) / detector.eigenvalues_.sum()
    q = detector.components_.shape[1]
    assert float(ratios[q - 1]) >= 0.8 and (q == 1 or float(ratios[q - 2]) < 0.8)
    assert KernelPCAOOD("corp", 0.5, 64, explained_variance=1.0).fit([inside]).components_.shape[1] <= 128


def test_scores_are_invariant_to_positive_rescaling_and_streaming():
    inside, outside = circle_data(seed=4, n_in=600, n_out=40)
    one_shot = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64, n_components=10).fit([inside])
    streamed = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64, n_components=10).fit(inside.split(77))
    torch.testing.assert_close(streamed.score(outside), one_shot.score(outside), rtol=1e-8, atol=1e-10)
    for mapping in ("corp", "cop"):
        detector = KernelPCAOOD(mapping, sigma=0.5, n_frequencies=64, n_components=5).fit([inside])
        torch.testing.assert_close(detector.score(3.7 * outside), detector.score(outside), rtol=1e-6, atol=1e-7)


def test_calibration_predict_and_state_round_trip(tmp_path):
    inside, outside = circle_data(seed=5)
    detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=128).fit([inside[:2000]])
    threshold = detector.calibrate(inside[2000:2500], tpr=0.9)
    accepted = float((~detector.predict(inside[2500:])).double().mean())
    assert accepted == pytest.approx(0.9, abs=0.06)  # fresh in-distribution samples: about 90 % kept
    assert float(detector.predict(outside).double().mean()) > 0.8
    torch.save(detector.state_dict(), tmp_path / "ood.pt")
    restored = KernelPCAOOD("corp", sigma=0.5, n_frequencies=128)
    restored.load_state_dict(torch.load(tmp_path / "ood.pt", weights_only=True))
    assert float(restored.threshold_) == threshold
    torch.testing.assert_close(restored.score(outside), detector.score(outside))
    assert torch.equal(restored.predict(outside), detector.predict(outside))


def old_format(state):
    """A state_dict as written before the fitted state took its trailing underscore: the names without it, and
    a NaN threshold and a zero count where they were unset."""
    old = {key[:-1] if key.endswith("_") else key: value for key, value in state.items()}
    old.setdefault("threshold", torch.tensor(float("nan"), dtype=torch.float64))
    old.setdefault("n_fitted", torch.zeros((), dtype=torch.float64))
    return old


def test_fitted_state_is_underscored_unset_before_the_fit_and_old_checkpoints_load():
    inside, outside = circle_data(seed=3, n_in=900, n_out=100)
    detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=32)
    assert all(getattr(detector, name) is None for name in FITTED)  # `__init__` stores the settings only
    assert list(detector.state_dict()) == ["sums._extra_state"]
    assert not detector.fitted and detector.threshold_ is None and detector.n_fitted_ is None
    detector.fit(inside[:600])
    threshold = detector.calibrate(inside[600:], tpr=0.9)
    assert list(detector.state_dict()) == [*FITTED, "sums._extra_state"]
    assert float(detector.threshold_) == threshold and float(detector.n_fitted_) == 600
    for removed in ("components", "threshold", "eigenvalues", "mean", "n_fitted"):  # one name each: `name_`
        assert not hasattr(detector, removed)
    other = KernelPCAOOD("corp", sigma=0.5, n_frequencies=32).fit(inside[:600])
    # the monitor's route: scores it computed and gathered itself
    assert other.calibrate_from_scores(detector.score(inside[600:]), tpr=0.9) == threshold
    with pytest.raises(ValueError, match="`scores` must be a non-empty tensor"):
        detector.calibrate_from_scores(torch.zeros(0))
    for state in (detector.state_dict(), old_format(detector.state_dict())):
        restored = KernelPCAOOD("corp", sigma=0.5, n_frequencies=32)
        restored.load_state_dict(state)
        assert float(restored.threshold_) == threshold and float(restored.n_fitted_) == 600
        torch.testing.assert_close(restored.score(outside), detector.score(outside), rtol=0, atol=0)
    partial = KernelPCAOOD("corp", sigma=0.5, n_frequencies=32).partial_fit(inside[:10])  # a fit under way
    for state in (partial.state_dict(), old_format(partial.state_dict())):
        restored = KernelPCAOOD("corp", sigma=0.5, n_frequencies=32)
        restored.load_state_dict(state)
        assert all(getattr(restored, name) is None for name in FITTED) and restored.sums.sample_count() == 10


def test_detection_metrics_conventions_and_mann_whitney_reference():
    perfect = detection_metrics(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.4, 0.5]))
    assert float(perfect["auroc"]) == 1.0 and float(perfect["fpr"]) == 0.0
    g = torch.Generator().manual_seed(0)
    same_in, same_out = torch.randn(4000, generator=g), torch.randn(4000, generator=g)
    same = detection_metrics(same_in, same_out)
    assert float(same["auroc"]) == pytest.approx(0.5, abs=0.02) and float(same["fpr"]) == pytest.approx(0.95, abs=0.02)
    scores_in, scores_out = torch.randn(300, generator=g), torch.randn(200, generator=g) + 1.0
    mann_whitney = float((scores_out[:, None] > scores_in[None, :]).double().mean())
    assert float(detection_metrics(scores_in, scores_out)["auroc"]) == pytest.approx(mann_whitney, abs=1e-6)
    # threshold convention: the ceil(0.95 n)-th smallest in-distribution score
    assert float(threshold_at_tpr(torch.arange(1.0, 101.0), 0.95)) == 95.0


def test_bad_input_raises_clear_errors():
    detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=16)
    with pytest.raises(RuntimeError, match="not fitted"):
        detector.score(torch.randn(3, 4))
    with pytest.raises(ValueError, match="explained_variance"):
        KernelPCAOOD(explained_variance=0.0)
    with pytest.raises(ValueError, match="explained_variance"):
        KernelPCAOOD(explained_variance=1.5)
    with pytest.raises(ValueError, match="mapping"):
        KernelPCAOOD(mapping="rbf")
    detector.fit([torch.randn(50, 4)])
    with pytest.raises(ValueError, match="width 5 but 4"):
        detector.score(torch.randn(3, 5))
    with pytest.raises(ValueError, match="NaN or Inf"):
        detector.partial_fit(torch.tensor([[1.0, float("nan"), 0.0, 0.0]]))
    with pytest.raises(RuntimeError, match="calibrate"):
        detector.predict(torch.randn(3, 4))
    with pytest.raises(ValueError, match="norm"):
        detector.score(torch.zeros(2, 4))  # cosine mapping of a zero vector
    with pytest.raises(RuntimeError, match="fewer than 2"):
        KernelPCAOOD().fit([])


def fit_on_shards(rank, world_size, empty_rank):
    inside, outside = circle_data(seed=6, n_in=900, n_out=30)
    detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64, n_components=8)
    shard = inside[rank::world_size] if empty_rank is None else (inside if rank != empty_rank else inside[:0])
    for batch in shard.split(100):
        detector.partial_fit(batch)
    detector.finalize()
    detector.calibrate(inside[rank::world_size], tpr=0.9)
    return detector.score(outside), float(detector.threshold_), float(detector.n_fitted_)


@pytest.mark.parametrize("empty_rank", [None, 1])
def test_ddp_fit_equals_single_process_fit(tmp_path, empty_rank):
    from tests.ddp import run_ddp

    inside, outside = circle_data(seed=6, n_in=900, n_out=30)
    single = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64, n_components=8).fit([inside])
    single.calibrate(inside, tpr=0.9)
    for status, *value in run_ddp(fit_on_shards, empty_rank, tmp_path=tmp_path):
        assert status == "ok", value
        scores, threshold, count = value[0]
        assert count == 900
        torch.testing.assert_close(scores, single.score(outside), rtol=1e-7, atol=1e-9)
        assert threshold == pytest.approx(float(single.threshold_), rel=1e-7)


@pytest.mark.parametrize("offset", [0.0, 1e3, 1e4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_pca_is_exact_under_a_large_mean_offset(offset, dtype):
    # issue 13: a mean offset of 1e3 / 1e4 gave top eigenvalues 1.72 / 79.0 instead of the offset-free 1.17
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3000, 8, generator=g, dtype=torch.float64) * torch.linspace(0.2, 1.1, 8, dtype=torch.float64))
    data = (x + offset).to(dtype)  # what the detector is given (float32 rounds the offset data itself)
    centred = data.double().numpy() - data.double().numpy().mean(0)
    reference = np.linalg.eigvalsh(centred.T @ centred / len(centred))[::-1]  # float64 numpy, centred first
    for fitted in (
        KernelPCAOOD("linear", n_components=3).fit(data),
        KernelPCAOOD("linear", n_components=3).fit(data.split(123)),
    ):
        np.testing.assert_allclose(fitted.eigenvalues_.numpy(), reference, rtol=1e-5, atol=1e-6 * reference[0])
    offset_free = np.linalg.eigvalsh(np.cov(x.numpy().T, bias=True))[-1]
    assert float(fitted.eigenvalues_[0]) == pytest.approx(offset_free, rel=1e-4 if dtype == torch.float32 else 1e-9)


@pytest.mark.parametrize("mapping", ["corp", "cop", "linear"])
def test_partial_fit_keeps_no_autograd_graph(mapping):
    weight = torch.randn(6, 6, requires_grad=True)
    detector = KernelPCAOOD(mapping, sigma=0.5, n_frequencies=16, n_components=2, chunk_size=50)
    for _ in range(3):
        detector.partial_fit(torch.randn(20, 6) @ weight)  # a graph hangs on every batch
    held = [*detector.sums.samples._pending, detector.sums.samples.state]
    assert held and all(t.grad_fn is None and not t.requires_grad for t in held)
    detector.finalize()
    fitted = [detector.mean_, detector.components_, detector.eigenvalues_]
    assert all(t.grad_fn is None and not t.requires_grad for t in fitted)


def test_fit_and_score_take_numpy_arrays_and_lists_as_scikit_learn_users_pass_them():
    inside, outside = circle_data(seed=2, n_in=600, n_out=100)
    reference = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64).fit(inside)
    expected = reference.score(outside)
    for table in (inside.numpy(), inside.tolist(), [inside[:250].numpy(), inside[250:].numpy()]):
        detector = KernelPCAOOD("corp", sigma=0.5, n_frequencies=64).fit(table)
        torch.testing.assert_close(detector.score(outside.numpy()), expected, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(detector.score(outside.tolist()), expected, rtol=1e-9, atol=1e-12)
    detector.calibrate(inside.numpy(), tpr=0.9)
    assert torch.equal(detector.predict(outside.numpy()), detector.predict(outside))


def test_a_refused_table_leaves_the_fitted_detector_as_it_was():
    inside, outside = circle_data(seed=4, n_in=300, n_out=50)
    detector = KernelPCAOOD("cop").fit(inside)
    before = detector.score(outside)
    with pytest.raises(ValueError, match="NaN"):
        detector.fit(torch.full((5, inside.shape[1]), float("nan")))
    torch.testing.assert_close(detector.score(outside), before)


def test_detection_metrics_take_arrays_and_lists_like_tensors():
    g = torch.Generator().manual_seed(1)
    scores_in, scores_out = torch.randn(50, generator=g, dtype=torch.float64), torch.randn(40, generator=g) + 1.0
    expected = detection_metrics(scores_in, scores_out, tpr=0.9)
    for pair in ((scores_in.numpy(), scores_out.numpy()), (scores_in.tolist(), scores_out.tolist())):
        got = detection_metrics(*pair, tpr=0.9)
        assert all(float(got[key]) == pytest.approx(float(expected[key]), abs=1e-7) for key in expected)
    infinite = detection_metrics(scores_in, torch.full((3,), float("inf")))  # +inf is the most OOD score, not NaN
    assert float(infinite["auroc"]) == pytest.approx(1.0) and float(infinite["fpr"]) == 0.0
