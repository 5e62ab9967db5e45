"""Checkpoints carry what a resume needs and no more: empty sides write their count only, covariances their
upper triangle, frequencies are redrawn from the seed; a kept reference and a mid-epoch state resume exactly."""

import pytest
import torch

from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi, SPECDivergence


def sizes(state):
    """The shapes of every tensor a metric's ``state_dict`` writes: its own entries and its packed sums."""
    tensors = {key: value for key, value in state.items() if torch.is_tensor(value)}
    tensors.update(state["_extra_state"].get("sums", {}))
    return {key: tuple(value.shape) for key, value in tensors.items()}


def test_an_empty_metric_writes_counts_only():
    state = FINCNovelty(sigma=1.0, n_frequencies=64, in_features=3).state_dict()
    assert sizes(state) == {"gen": (1,), "ref": (1,)}
    assert "feature_map.omega" not in state and state["_extra_state"]["in_features"] == 3


def test_after_reset_only_the_kept_reference_is_written_and_it_resumes_exactly():
    g = torch.Generator().manual_seed(0)
    ref, gen = torch.randn(300, 4, generator=g, dtype=torch.float64), torch.randn(200, 4, generator=g, dtype=torch.float64)
    metric = FINCNovelty(sigma=1.5, n_frequencies=32, reset_real_features=False)
    metric.update(ref, real=True)
    metric.update(gen, real=False)
    metric.reset()  # the end of a validation epoch
    state = metric.state_dict()
    width = 64
    triangle = width * (width + 1) // 2  # count, sum, the upper triangle: the reference keeps no multiplier sums
    assert sizes(state)["ref"] == (1 + width + triangle,)
    assert sizes(state)["gen"] == (1,)  # no (2r)^2 zeros
    restored = FINCNovelty(sigma=1.5, n_frequencies=32, reset_real_features=False)
    restored.load_state_dict(state)
    for m in (metric, restored):
        m.update(gen, real=False)
    assert float(restored.compute()) == float(metric.compute()) and restored.reading().threshold() == metric.reading().threshold()
    assert torch.equal(restored.reading().novel_modes(3).p_values, metric.reading().novel_modes(3).p_values)
    for kept, original in zip(restored.ref, metric.ref, strict=True):
        torch.testing.assert_close(kept.cov_sum, original.cov_sum, rtol=0, atol=0)
    metric.update(ref, real=False)
    restored.load_state_dict(metric.state_dict())
    kept, original = restored.gen[0].noise_sums(), metric.gen[0].noise_sums()
    for name in ("total", "weighted", "weight_sums", "weighted_features"):  # the generated side's draws travel too
        torch.testing.assert_close(getattr(kept, name), getattr(original, name), rtol=0, atol=0)


def test_the_state_is_two_plus_draws_matrices_and_an_old_two_sided_checkpoint_is_refused():
    """The reference keeps Q only, the generated side Q and its draws: 2 + draws (2r)^2 sums. A checkpoint of the
    layout before (multiplier sums on both sides, no `noise` setting) is refused, naming what to do."""
    g = torch.Generator().manual_seed(1)
    metric = FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=2)
    metric.update(torch.randn(40, 3, generator=g), real=True)
    metric.update(torch.randn(30, 3, generator=g), real=False)
    state = metric.state_dict()
    width, triangle = 16, 16 * 17 // 2
    assert sizes(state)["ref"] == (1 + width + triangle,)
    assert sizes(state)["gen"] == (1 + width + triangle + 2 * (1 + triangle + width),)  # draws of Q and of the mean
    key = next(k for k in state if k.endswith("_extra_state"))
    old = {**state[key], "sums": dict(state[key]["sums"])}
    del old["settings"]  # the earlier layout wrote no settings; its reference held the draws too
    old["sums"]["ref"] = torch.cat([old["sums"]["ref"], old["sums"]["gen"][1 + width + triangle :]])
    fresh = FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=2)
    with pytest.raises(RuntimeError, match="multiplier draws on both sides.*Accumulate the data again"):
        fresh.load_state_dict({**state, key: old})
    assert fresh.sample_count(real=True) == 0  # nothing restored


def test_a_checkpoint_without_the_mean_draws_is_refused():
    """The layout before the mode shares' standard errors: the generated side's draws without draws of its mean."""
    g = torch.Generator().manual_seed(1)
    metric = FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=2)
    metric.update(torch.randn(40, 3, generator=g), real=True)
    metric.update(torch.randn(30, 3, generator=g), real=False)
    state = metric.state_dict()
    key = next(k for k in state if k.endswith("_extra_state"))
    old = {**state[key], "sums": dict(state[key]["sums"]), "settings": {"noise": "generated-side draws", "draws": 2}}
    old["sums"]["gen"] = old["sums"]["gen"][: -2 * 16]
    fresh = FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=2)
    with pytest.raises(RuntimeError, match="no draws of its mean.*Accumulate the data again"):
        fresh.load_state_dict({**state, key: old})
    assert fresh.sample_count(real=True) == 0


def test_a_mid_epoch_state_with_pending_rows_resumes_exactly():
    x = torch.randn(700, 5, dtype=torch.float64)
    metric = FKEAVendi(sigma=2.0, n_frequencies=32, chunk_size=256)
    metric.update(x[:300])  # 300 >= 256 pending: flushed
    metric.update(x[300:500])  # these 200 wait in the buffer
    assert metric.samples.pending_rows == 200
    restored = FKEAVendi(sigma=2.0, n_frequencies=32, chunk_size=256)
    restored.load_state_dict(metric.state_dict())  # state_dict flushed them into the sums first
    for m in (metric, restored):
        m.update(x[500:])
    assert float(restored.compute()) == pytest.approx(float(metric.compute()), rel=1e-12)
    assert restored.sample_count() == 700


def test_persistent_false_leaves_the_sums_out():
    metric = FastMMD(sigma=1.0, n_frequencies=16)
    metric.update(torch.randn(50, 3), real=True)
    metric.persistent(False)
    assert sizes(metric.state_dict()) == {}
    restored = FastMMD(sigma=1.0, n_frequencies=16)
    restored.load_state_dict(metric.state_dict())
    assert restored.sample_count(real=True) == 0 and restored.in_features == 3


def test_a_checkpoint_with_other_frequencies_is_refused():
    metric = FKEAVendi(sigma=1.0, n_frequencies=16, seed=1)
    metric.update(torch.randn(20, 3))
    other = FKEAVendi(sigma=1.0, n_frequencies=16, seed=2, in_features=3)
    with pytest.raises(RuntimeError, match="other random frequencies.*`seed`"):
        other.load_state_dict(metric.state_dict())


def test_a_checkpoint_of_another_configuration_is_refused_before_anything_is_restored():
    metric = FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=3)
    metric.update(torch.randn(40, 3), real=True)
    metric.update(torch.randn(40, 3), real=False)
    other = FINCNovelty(sigma=1.0, n_frequencies=8, noise_draws=2)
    other.update(torch.randn(10, 3), real=False)
    before = other.sample_count(real=False)
    with pytest.raises(RuntimeError, match="written with noise_draws=3 where this metric has noise_draws=2"):
        other.load_state_dict(metric.state_dict())
    assert other.sample_count(real=False) == before
    old = metric.state_dict()  # as written with content groups: `gen_0` .. `ref_3`
    key = next(k for k in old if k.endswith("_extra_state"))
    old[key]["sums"] = {f"{side}_{j}": old[key]["sums"][side][:1] for side in ("gen", "ref") for j in range(4)}
    with pytest.raises(RuntimeError, match=r"sums \[.*'gen_3'.*\] where this metric keeps.*content groups"):
        FINCNovelty(sigma=1.0, n_frequencies=8).load_state_dict(old)
    old[key]["sums"] = {"gen": old[key]["sums"]["gen_0"], "ref_a": old[key]["sums"]["ref_0"],
                        "ref_b": old[key]["sums"]["ref_1"]}  # fmt: skip
    with pytest.raises(RuntimeError, match="`ref_a` / `ref_b`"):
        FINCNovelty(sigma=1.0, n_frequencies=8).load_state_dict(old)


def test_paired_and_multi_bandwidth_states_round_trip():
    a, b = torch.randn(80, 4, dtype=torch.float64), torch.randn(80, 3, dtype=torch.float64)
    spec = SPECDivergence("cosine")
    spec.update(a, b)
    restored = SPECDivergence("cosine")
    restored.load_state_dict(spec.state_dict())  # widths come back from the extra state
    assert float(restored.compute()) == float(spec.compute())
    mmd = FastMMD(sigma=[1.0, 2.0], n_frequencies=16)
    mmd.update(a, real=True)
    mmd.update(a + 1, real=False)
    restored = FastMMD(sigma=[1.0, 2.0], n_frequencies=16)
    restored.load_state_dict(mmd.state_dict())
    torch.testing.assert_close(restored.reading().test().p_value, mmd.reading().test().p_value, rtol=0, atol=0)


def test_packing_is_exact_and_checks_its_size():
    metric = FastMMD(sigma=[1.0, 2.0], n_frequencies=6)
    metric.update(torch.randn(30, 2, dtype=torch.float64), real=True)
    real = metric.real
    packed = real.pack(real.state)
    assert packed.shape == (1 + 2 * (12 + 12 * 13 // 2),)  # per bandwidth: the sum and the upper triangle
    assert torch.equal(real.unpack(packed), real.state)
    with pytest.raises(ValueError, match="settings it was saved with"):
        real.unpack(packed[:-1])


def snapshot(metric):
    """Everything a load could change: the widths, every state's value, the packed sums and shifts it writes."""
    state = metric.state_dict()
    extra = state.pop("_extra_state")
    values = {key: value.clone() for key, value in state.items() if torch.is_tensor(value)}
    values.update({f"sums.{key}": value.clone() for key, value in extra.get("sums", {}).items()})
    values.update({name: getattr(metric, a.state_name).clone() for name, a in metric.accumulators.items()})
    return metric.in_features, values


def same(a, b):
    return a[0] == b[0] and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


def conditional(**kwargs):
    from lightning_spectral.metrics import ConditionalVendi

    return ConditionalVendi(sigma=1.0, prompt_sigma=0.5, n_frequencies=16, alpha=2, **kwargs)


def labelled(n=40, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g, dtype=torch.float64), torch.arange(n) % classes


@pytest.mark.parametrize("older", [False, True], ids=["settings", "no-settings"])
@pytest.mark.parametrize("fresh", [True, False], ids=["unbuilt", "fed"])
@pytest.mark.parametrize("other", [dict(num_classes=4), dict(num_classes=3, per_prompt_frequencies=4)])
def test_a_refused_conditional_checkpoint_leaves_the_metric_as_it_was(fresh, other, older):
    saved = conditional(num_classes=3)
    saved.update(*labelled())
    state = saved.state_dict()
    if older:  # a checkpoint from before the settings were written: the sums' sizes give the mismatch away
        del state["_extra_state"]["settings"]
    metric = conditional(**other)
    if not fresh:
        x, labels = labelled(seed=1, classes=other["num_classes"])
        metric.update(x, labels)
    before = snapshot(metric)
    with pytest.raises((RuntimeError, ValueError), match=r"written with (num_classes=3|per_prompt_frequencies=16)"
                       r"|written for inputs of width \(4, 3\) where this metric takes \(4, 4\)"
                       r"|'per_prompt' state has \d+ entries where these settings need"):
        metric.load_state_dict(state)
    assert same(snapshot(metric), before)  # an unbuilt metric stays unbuilt (no width from the checkpoint)
    x, labels = labelled(seed=2, classes=other["num_classes"])
    metric.update(x, labels)  # a valid batch is still taken
    assert metric.sample_count() == (80 if not fresh else 40)


@pytest.mark.parametrize("side", ["joint", "prompts", "per_prompt"])
def test_tampered_sums_are_refused_and_change_nothing(side):
    saved = conditional(num_classes=3)
    saved.update(*labelled())
    state = saved.state_dict()
    state["_extra_state"]["sums"][side][-1] = 1e308  # a corner of Q (or of the last lane's Q)
    metric = conditional(num_classes=3)
    before = snapshot(metric)
    with pytest.raises(ValueError, match=rf"'{side}' sums .*edited or corrupted"):
        metric.load_state_dict(state)
    assert same(snapshot(metric), before)
    metric.load_state_dict(saved.state_dict())  # the untouched checkpoint loads, and gives the same value
    assert float(metric.compute()) == float(saved.compute()) >= 1


def test_counts_of_the_same_samples_must_agree_and_be_integers():
    saved = conditional(num_classes=3)
    saved.update(*labelled())
    state = saved.state_dict()
    state["_extra_state"]["sums"]["prompts"][0] = 41  # one more sample than the joint sums saw
    with pytest.raises(ValueError, match=r"'prompts' sums count 41 samples and its 'joint' sums 40"):
        conditional(num_classes=3).load_state_dict(state)
    vendi = FKEAVendi(sigma=1.0, n_frequencies=16)
    vendi.update(labelled()[0])
    state = vendi.state_dict()
    state["_extra_state"]["sums"]["samples"][0] = 39.5
    with pytest.raises(ValueError, match=r"'samples' sums count 39.5 samples \(a count is a non-negative integer\)"):
        FKEAVendi(sigma=1.0, n_frequencies=16).load_state_dict(state)


@pytest.mark.parametrize("make", [
    lambda: FKEAVendi(sigma=1.0, n_frequencies=16),
    lambda: FastMMD(sigma=1.0, n_frequencies=16, statistic_only=True),
    lambda: FINCNovelty(sigma=1.0, n_frequencies=16),
    lambda: SPECDivergence(sigma_a=1.0, sigma_b=1.0, n_frequencies=16),
], ids=["FKEAVendi", "FastMMD", "FINCNovelty", "SPECDivergence"])
def test_every_metric_refuses_tampered_sums(make):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 3, generator=g, dtype=torch.float64)
    saved = make()
    if saved.inputs == "paired":
        saved.update(x, x + 0.1)
    elif saved.two_sample:
        saved.update(x, real=True)
        saved.update(x + 1, real=False)
    else:
        saved.update(x)
    state = saved.state_dict()
    name = next(iter(state["_extra_state"]["sums"]))
    state["_extra_state"]["sums"][name][1] = 1e308 if saved.inputs != "two" else 1e3  # s beyond what n samples give
    metric = make()
    before = snapshot(metric)
    with pytest.raises(ValueError, match=rf"'{name}' sums .*edited or corrupted"):
        metric.load_state_dict(state)
    assert same(snapshot(metric), before)
    metric.load_state_dict(saved.state_dict())


def test_an_older_checkpoint_without_settings_still_loads():
    saved = conditional(num_classes=3)
    saved.update(*labelled())
    state = saved.state_dict()
    del state["_extra_state"]["settings"]
    metric = conditional(num_classes=3)
    metric.load_state_dict(state)
    assert float(metric.compute()) == float(saved.compute())
