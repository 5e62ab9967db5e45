"""Conditional-Vendi / RKE, Information-Vendi and the prompt-agnostic Schur complement against their n x n oracles."""

import math

import pytest
import torch

from lightning_spectral.algebra import psd_eigenvalues
from lightning_spectral.functional.conditional import (
    conditional_covariances,
    conditional_rke_exact,
    conditional_scores,
    conditional_spectra_exact,
    conditional_vendi,
    conditional_vendi_exact,
    prompt_agnostic_covariance,
    prompt_agnostic_eigenvalues_exact,
)
from lightning_spectral.functional.fkea import vendi_exact
from lightning_spectral.kernels import JointGaussianRFF, gaussian_kernel

ORDERS = [1, 2, "inf"]


def labelled(n=240, classes=4, spread=3.0, noise=1.0, seed=0):
    """Samples whose mean depends on a one-hot prompt: (x (n, 5), one-hot t (n, classes), labels (n,))."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    centres = spread * torch.randn(classes, 5, generator=generator, dtype=torch.float64)
    x = centres[labels] + noise * torch.randn(n, 5, generator=generator, dtype=torch.float64)
    return x, torch.nn.functional.one_hot(labels, classes).double(), labels


def test_one_prompt_gives_the_unconditional_vendi_exactly_and_with_features():
    x = torch.randn(120, 4, dtype=torch.float64)
    t = torch.ones(120, 3, dtype=torch.float64)
    for order in ORDERS:
        exact = conditional_vendi_exact(x, t, sigma=1.5, prompt_sigma=1.0, alpha=order)
        assert float(exact) == pytest.approx(float(vendi_exact(x, 1.5, alpha=order)), rel=1e-9)
        info = conditional_vendi_exact(x, t, 1.5, 1.0, alpha=order, score="information")
        assert float(info) == pytest.approx(1.0, abs=1e-9)
    # features: a constant prompt rotates each (cos, sin) pair by a constant phase, an orthogonal map of C_X
    scores = conditional_vendi(x, t, 1.5, 1.0, n_frequencies=64, alpha=ORDERS)
    unconditional = conditional_vendi(x, t, 1.5, 1.0, n_frequencies=64, alpha=ORDERS, score="vendi")
    for order in ORDERS:
        assert float(scores[order]) == pytest.approx(float(unconditional[order]), rel=1e-9)


def test_samples_determined_by_a_one_hot_prompt_have_conditional_vendi_one():
    x, t, labels = labelled(noise=0.0)
    # prompt_sigma 0.05: k_T = exp(-1 / 0.0025) ~ 0 across labels, 1 within: K_X o K_T = K_T
    for order in ORDERS:
        assert float(conditional_vendi_exact(x, t, 1.0, 0.05, alpha=order)) == pytest.approx(1.0, abs=1e-9)
        info = conditional_vendi_exact(x, t, 1.0, 0.05, alpha=order, score="information")
        prompts = conditional_vendi_exact(x, t, 1.0, 0.05, alpha=order, score="prompt_vendi")
        assert float(info) == pytest.approx(float(vendi_exact(x, 1.0, alpha=order)), rel=1e-6)
        n = len(x)  # four equally likely prompts: 4 at every order; RKE counts pairs of distinct samples
        assert float(prompts) == pytest.approx((n - 1) / (n / 4 - 1) if order == 2 else 4.0, rel=1e-9)
    # features: the cross-prompt kernel entries are ~1/sqrt(r) noise instead of 0
    estimate = conditional_vendi(x, t, 1.0, 0.05, n_frequencies=1024, alpha=2)
    assert float(estimate) == pytest.approx(1.0, abs=0.05)


def test_clustered_prompts_closed_form_is_the_average_within_prompt_entropy():
    # 0/1 prompt kernel: H_1(X|T) = sum_g p_g H_1(rho_g); order a: escort-weighted (block-diagonal joint kernel)
    x, t, labels = labelled(n=200, classes=3, noise=0.7)
    sigma = 1.0
    parts = [x[labels == g] for g in range(3)]
    p = torch.tensor([len(part) / 200 for part in parts], dtype=torch.float64)
    within = torch.stack([torch.log(vendi_exact(part, sigma, alpha=1)) for part in parts])
    expected = math.exp(float((p * within).sum()))
    assert float(conditional_vendi_exact(x, t, sigma, 0.05, alpha=1)) == pytest.approx(expected, rel=1e-8)
    # order 2 over pairs of distinct samples: the joint's pairs are the within-prompt pairs, n_g (n_g - 1) of each
    within2 = torch.stack([torch.log(vendi_exact(part, sigma, alpha=2)) for part in parts])
    pairs = torch.tensor([len(part) * (len(part) - 1) for part in parts], dtype=torch.float64)
    weights = pairs / pairs.sum()
    expected2 = 1 / float((weights * torch.exp(-within2)).sum())
    assert float(conditional_vendi_exact(x, t, sigma, 0.05, alpha=2)) == pytest.approx(expected2, rel=1e-8)


def test_factorisation_and_bounds():
    x, t, _ = labelled(noise=1.5)
    t = t + 0.3 * torch.randn_like(t)  # smooth prompt kernel, not 0/1
    for order in (1, 2):
        spectra = conditional_spectra_exact(x, t, 2.0, 1.0)
        cond = conditional_vendi_exact(x, t, 2.0, 1.0, alpha=order)
        info = conditional_vendi_exact(x, t, 2.0, 1.0, alpha=order, score="information")
        vendi = conditional_vendi_exact(x, t, 2.0, 1.0, alpha=order, score="vendi")
        assert float(cond * info) == pytest.approx(float(vendi), rel=1e-9)
        assert 1 - 1e-9 <= float(cond) <= float(vendi) + 1e-9
        assert float(torch.stack(list(spectra)).sum(1).sub(1).abs().max()) < 1e-9  # three unit traces


def test_rke_without_eigendecomposition_matches_order_two():
    x, t, _ = labelled(noise=1.0)
    assert float(conditional_rke_exact(x, t, 2.0, 0.7)) == pytest.approx(
        float(conditional_vendi_exact(x, t, 2.0, 0.7, alpha=2)), rel=1e-9
    )


def test_features_are_the_proxy_kernels_exactly():
    # the joint map's inner products are the RFF proxy of k_X k_T: the covariances have the proxy matrices' spectra
    x, t, _ = labelled(n=90, noise=1.0)
    rff = JointGaussianRFF(2.0, 0.7, 40, seed=3, in_features=(5, 4))
    rows = torch.cat([x, t], 1)
    covariances = conditional_covariances(x, t, 2.0, 0.7, n_frequencies=40, seed=3)
    for name, covariance in zip(("joint", "samples", "prompts"), covariances, strict=True):
        phi = rff(rows, name)
        proxy = psd_eigenvalues(phi @ phi.T / 90)[:80]
        assert torch.allclose(psd_eigenvalues(covariance), proxy, atol=1e-12)


@pytest.mark.parametrize("n_frequencies", [256, 1024])
def test_random_features_converge_to_the_oracle(n_frequencies):
    # kernel entries carry ~1/sqrt(r) noise; the entropies are smooth in them: relative error O(1/sqrt(r)).
    # Tolerance 2 / sqrt(r): 12.5 % at r = 256, 6.25 % at r = 1024 (measured 4 % at r = 512, 0.2 % at 2048).
    x, t, _ = labelled(n=300, classes=5, noise=1.0)
    tolerance = 2 / math.sqrt(n_frequencies)
    exact = conditional_spectra_exact(x, t, 2.0, 0.5)
    covariances = conditional_covariances(x, t, 2.0, 0.5, n_frequencies=n_frequencies, seed=1)
    for order in (1, 2):
        expected, estimate = conditional_scores(exact, order), conditional_scores(covariances, order)
        for name in ("conditional", "information", "vendi"):
            assert float(estimate[name]) == pytest.approx(float(expected[name]), rel=tolerance), (order, name)


def test_schur_complement_matches_its_kernel_oracle_with_the_proxy_kernels():
    # with the RFF proxy kernels K = Phi Phi^T, the feature-space Schur complement and the kernel formula agree
    x, t, _ = labelled(n=80, noise=1.0)
    rff = JointGaussianRFF(2.0, 0.7, 30, seed=0, in_features=(5, 4))
    rows = torch.cat([x, t], 1)
    phi_x, phi_t = rff(rows, "samples"), rff(rows, "prompts")
    joint = torch.cat([phi_x, phi_t], 1)
    schur = prompt_agnostic_covariance(joint.T @ joint / 80, 60, ridge=1e-2)
    ridge, k_x, k_t = 1e-2, phi_x @ phi_x.T, phi_t @ phi_t.T
    values, vectors = torch.linalg.eigh(k_x)
    root = vectors * values.clamp_min(0).sqrt() @ vectors.T
    inverse = torch.linalg.inv(k_t + 80 * ridge * torch.eye(80, dtype=torch.float64))
    kernel_form = psd_eigenvalues(ridge * root @ inverse @ root)
    assert torch.allclose(psd_eigenvalues(schur)[:60], kernel_form[:60], atol=1e-10)
    # the exact oracle: one prompt leaves (nearly) all of the sample variation unexplained but the mean direction
    constant = torch.ones(80, 2, dtype=torch.float64)
    values = prompt_agnostic_eigenvalues_exact(x, constant, 2.0, 1.0, ridge=1e-6)
    centred = gaussian_kernel(x, sigma=2.0)
    centring = torch.eye(80, dtype=torch.float64) - 1 / 80
    assert torch.allclose(values, psd_eigenvalues(centring @ centred @ centring / 80), atol=1e-5)


def test_bad_pairs_are_refused_naming_the_argument():
    x = torch.randn(10, 3)
    with pytest.raises(ValueError, match="one prompt per generated sample"):
        conditional_vendi_exact(x, torch.randn(9, 2), 1.0, 1.0)
    with pytest.raises(ValueError, match="prompt_sigma"):
        conditional_vendi(x, torch.randn(10, 2), 1.0, 0.0)
    with pytest.raises(ValueError, match="score"):
        conditional_vendi(x, torch.randn(10, 2), 1.0, 1.0, score="joint")


# ---- the metric --------------------------------------------------------------------------------------------------
from lightning_spectral.metrics import ConditionalVendi  # noqa: E402


def test_metric_equals_the_functional_over_batches():
    x, t, _ = labelled(n=250, noise=1.0)
    metric = ConditionalVendi(2.0, 0.5, 64, alpha=[1, 2, "inf"], seed=4, chunk_size=60)
    for part in torch.arange(250).split(37):
        metric.update(x[part], t[part])
    covariances = conditional_covariances(x, t, 2.0, 0.5, n_frequencies=64, seed=4)
    summary, computed = metric.reading().summary(), metric.compute()
    for order in (1, 2, "inf"):
        want = conditional_scores(covariances, order, n=250)
        assert float(computed[order]) == pytest.approx(float(want["conditional"]), rel=1e-9)
        assert float(summary[""][order]) == pytest.approx(float(want["conditional"]), rel=1e-9)
        assert float(summary["information"][order]) == pytest.approx(float(want["information"]), rel=1e-9)
        assert float(summary["vendi"][order]) == pytest.approx(float(want["vendi"]), rel=1e-9)
        assert float(summary["prompt_vendi"][order]) == pytest.approx(float(want["prompt_vendi"]), rel=1e-9)
    assert float(summary["n_features"]) == 2 * metric.n_frequencies and float(summary["n"]) == metric.sample_count()
    assert metric.sample_count() == 250


def test_integer_prompts_are_one_hot_and_per_prompt_vendi_names_the_collapsed_prompt():
    x, t, labels = labelled(n=400, classes=4, noise=1.0)
    x[labels == 3] = x[labels == 3][0]  # prompt 3 collapsed
    by_label = ConditionalVendi(2.0, 0.1, 512, alpha=1, num_classes=4, per_prompt_frequencies=256)
    by_onehot = ConditionalVendi(2.0, 0.1, 512, alpha=1)
    by_label.update(x, labels)
    by_onehot.update(x, t)
    assert float(by_label.compute()) == pytest.approx(float(by_onehot.compute()), rel=1e-6)  # float32 one-hot rows
    reading = by_label.reading()
    per_prompt = reading.per_prompt()
    for label in range(3):  # per-label Vendi converges to the exact Vendi of the label's samples, O(1/sqrt(r_p))
        exact = vendi_exact(x[labels == label], 2.0, alpha=1)
        assert float(per_prompt[label]) == pytest.approx(float(exact), rel=2 / math.sqrt(256))
    assert float(per_prompt[3]) == pytest.approx(1.0, abs=1e-6)
    assert reading.prompt_counts().tolist() == [100.0] * 4
    assert [label for label, _, _ in reading.least_diverse(2)][0] == 3
    assert float(reading.summary()["min_prompt_vendi"]) == pytest.approx(1.0, abs=1e-6)
    batches = [((x[ids], labels[ids]), ids) for ids in torch.arange(400).split(64)]
    gallery = reading.galleries(batches, k=2, per_mode=5)["least_diverse_prompts"]
    assert gallery.labels[0].startswith("prompt 3: Vendi 1.00 over 100 samples")
    assert (labels[gallery.samples[0][0]] == 3).all() and len(gallery.samples[0][0]) == 5


def test_a_prompt_with_no_samples_is_nan_and_a_checkpoint_restores_every_sum():
    x, t, labels = labelled(n=120, classes=3, noise=1.0)
    metric = ConditionalVendi(2.0, 0.3, 32, alpha=2, num_classes=5, per_prompt_frequencies=8)
    metric.update(x, labels)
    per_prompt = metric.reading().per_prompt()
    assert per_prompt[3:].isnan().all() and not per_prompt[:3].isnan().any()
    restored = ConditionalVendi(2.0, 0.3, 32, alpha=2, num_classes=5, per_prompt_frequencies=8)
    restored.load_state_dict(metric.state_dict())
    assert float(restored.compute()) == pytest.approx(float(metric.compute()), rel=1e-12)
    torch.testing.assert_close(restored.reading().per_prompt(), per_prompt, rtol=1e-12, atol=0, equal_nan=True)
    other = ConditionalVendi(2.0, 0.3, 32, alpha=2, num_classes=5, per_prompt_frequencies=8, seed=1)
    with pytest.raises(RuntimeError, match="other random frequencies"):
        other.load_state_dict(metric.state_dict())


def test_images_through_feature_and_reset():
    feature = torch.nn.Flatten()
    images = torch.rand(60, 1, 2, 3)
    labels = torch.arange(60) % 3
    metric = ConditionalVendi(1.0, 0.1, 32, alpha=2, num_classes=3, per_prompt_frequencies=8, feature=feature,
                              normalize=True)
    metric.update(images, labels)
    plain = ConditionalVendi(1.0, 0.1, 32, alpha=2)
    plain.update(images.flatten(1), torch.nn.functional.one_hot(labels, 3).float())
    assert float(metric.compute()) == pytest.approx(float(plain.compute()), rel=1e-6)
    metric.reset()
    assert metric.sample_count() == 0 and float(metric.reading().prompt_counts().sum()) == 0


def test_label_prompts_read_the_prompt_side_from_the_counts_and_match_the_general_path():
    x, _, labels = labelled(n=300, classes=5, noise=1.0)
    general = ConditionalVendi(2.0, 0.5, 128, alpha=[1, 2], num_classes=5, per_prompt_frequencies=16)
    cheap = ConditionalVendi(2.0, 0.5, 128, alpha=[1, 2], num_classes=5, per_prompt_frequencies=16,
                             unconditional=False, label_prompts=True)
    for part in torch.arange(300).split(70):
        general.update(x[part], labels[part])
        cheap.update(x[part], labels[part])
    assert set(cheap.accumulators) == {"joint", "per_prompt"}
    want, got = general.reading().summary(), cheap.reading().summary()
    assert set(got) == {"", "prompt_vendi", "min_prompt_vendi", "prompt", "sigma", "n", "n_features"}
    for order in (1, 2):  # the accumulated prompt side holds float32 features of the one-hot rows
        assert float(got[""][order]) == pytest.approx(float(want[""][order]), rel=1e-5)
        assert float(got["prompt_vendi"][order]) == pytest.approx(float(want["prompt_vendi"][order]), rel=1e-5)
        assert float(cheap.compute()[order]) == pytest.approx(float(got[""][order]), rel=1e-12)
    with pytest.raises(ValueError, match="integer\\s+labels"):
        cheap.update(x[:4], torch.nn.functional.one_hot(labels[:4], 5).float(), labels=labels[:4])


@pytest.mark.parametrize("label_prompts", [False, True])
def test_integer_prompts_with_disagreeing_labels_are_refused_before_any_sum_changes(label_prompts):
    x, _, labels = labelled(n=60, classes=3, noise=1.0)
    metric = ConditionalVendi(2.0, 0.1, 32, alpha=2, num_classes=3, per_prompt_frequencies=8,
                              label_prompts=label_prompts)
    metric.update(x[:30], labels[:30], labels=labels[:30])  # agreeing labels= are accepted
    with pytest.raises(ValueError, match=r"`labels=` disagrees"):
        metric.update(x[30:], labels[30:], labels=(labels[30:] + 1) % 3)
    alone = ConditionalVendi(2.0, 0.1, 32, alpha=2, num_classes=3, per_prompt_frequencies=8,
                             label_prompts=label_prompts)
    alone.update(x[:30], labels[:30])  # the refused batch left every sum as it was
    assert metric.sample_count() == 30 and float(metric.compute()) == float(alone.compute())
    reading, alone_reading = metric.reading(), alone.reading()
    assert torch.equal(reading.prompt_counts(), alone_reading.prompt_counts())
    assert torch.equal(reading.per_prompt(), alone_reading.per_prompt())


def test_least_diverse_skips_labels_with_fewer_than_min_count_samples():
    x, _, labels = labelled(n=90, classes=3, noise=1.0)
    x[labels == 2] = x[labels == 2][0]  # label 2 collapsed over 30 samples
    metric = ConditionalVendi(2.0, 0.1, 64, alpha=1, num_classes=5, per_prompt_frequencies=32)
    metric.update(x, labels)
    metric.update(torch.randn(1, x.shape[1]), torch.tensor([3]))  # label 3 seen once: Vendi exactly 1
    reading = metric.reading()
    assert float(reading.per_prompt()[3]) == pytest.approx(1.0, abs=1e-9)
    every = reading.least_diverse(5, min_count=1)  # the single sample ranks with the collapsed label
    assert {label for label, _, _ in every[:2]} == {2, 3} and len(every) == 4
    worst = reading.least_diverse(5)  # default min_count=2: label 3 dropped, label 4 never seen
    assert [label for label, _, _ in worst][0] == 2 and {label for label, _, _ in worst} == {0, 1, 2}
    assert [count for _, _, count in worst] == [30, 30, 30]
    assert reading.least_diverse(5, min_count=31) == []
    batches = [((x, labels), torch.arange(90))]
    gallery = reading.galleries(batches, k=1, per_mode=3)["least_diverse_prompts"]
    assert gallery.labels[0].startswith("prompt 2: Vendi 1.00 over 30 samples")
    with pytest.raises(ValueError, match="`min_count` must be an integer >= 1"):
        reading.least_diverse(2, min_count=0)
    varied = ConditionalVendi(2.0, 0.1, 64, alpha=1, num_classes=5, per_prompt_frequencies=32)
    x, _, labels = labelled(n=90, classes=3, noise=1.0)
    varied.update(x, labels)
    varied.update(torch.randn(1, x.shape[1]), torch.tensor([3]))  # seen once: not the "least diverse prompt"
    varied_reading = varied.reading()
    assert float(varied_reading.summary()["min_prompt_vendi"]) == pytest.approx(
        min(v for _, v, _ in varied_reading.least_diverse(3))
    )
    assert float(varied_reading.summary()["min_prompt_vendi"]) > 1.5


def test_prompt_agnostic_modes_are_the_schur_complement_of_the_paired_features():
    x, t, labels = labelled(n=200, classes=4, noise=1.0)
    metric = ConditionalVendi(2.0, 0.5, 24, alpha=2, seed=1, prompt_agnostic=True, ridge=1e-2)
    for part in torch.arange(200).split(45):
        metric.update(x[part], t[part])
    rff = JointGaussianRFF(2.0, 0.5, 24, seed=1, in_features=(5, 4))
    rows = torch.cat([x, t], 1)
    phi = torch.cat([rff(rows, "samples"), rff(rows, "prompts")], 1)
    want = prompt_agnostic_covariance(phi.T @ phi / 200, 48, ridge=1e-2)
    reading = metric.reading()
    torch.testing.assert_close(reading.prompt_agnostic_covariance(), want, rtol=1e-9, atol=1e-12)
    modes = reading.prompt_agnostic_modes(3)
    assert torch.allclose(modes.eigenvalues, psd_eigenvalues(want)[:3], atol=1e-12)
    share = float(reading.summary()["prompt_agnostic_share"])
    assert 0 < share < 1 and share == pytest.approx(float(want.trace()), rel=1e-9)
    batches = [(x[ids], ids) for ids in torch.arange(200).split(64)]
    top = reading.prompt_agnostic_top_samples(batches, k=2, per_mode=5)
    scores = rff(torch.cat([x, torch.zeros(200, 4, dtype=x.dtype)], 1), "samples").double() @ modes.eigenvectors[:, 0]
    assert set(top[0][0].tolist()) == set(torch.argsort(scores, descending=True)[:5].tolist())
    # one prompt: the prompts explain only the mean, the complement is the centred covariance (trace 1 - |mu|^2)
    single = ConditionalVendi(2.0, 0.5, 24, alpha=2, seed=1, prompt_agnostic=True, ridge=1e-9)
    single.update(x, torch.ones(200, 2, dtype=torch.float64))
    mean = rff(rows, "samples").double().mean(0)
    assert float(single.reading().summary()["prompt_agnostic_share"]) == pytest.approx(1 - float(mean @ mean), rel=1e-5)
