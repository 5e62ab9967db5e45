"""Images in (frozen extractors, torchmetrics' image conventions) and the GeneratedSamples callback: sharding,
logged values against the metrics computed by hand, galleries, resume, DDP, and the recipe on the collapse run."""

import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from digits_vae import DigitsVAE
from lightning.pytorch.callbacks import ModelCheckpoint
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_spectral.callbacks import GeneratedSamples, draw_samples, sample_chunks
from lightning_spectral.callbacks.report import flatten_values, logged_values
from lightning_spectral.data import DigitsImages, load_digit_images
from lightning_spectral.encoders import ClipImageFeature, ImageFeature, PixelImageFeature, TimmImageFeature
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi
from tests.conftest import quiet_trainer

ROOT = Path(__file__).resolve().parents[1]
SIGMA = 1.5
TINY_CLIP = dict(
    embed_dim=16,
    vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
    text_cfg=dict(context_length=8, width=32, heads=2, layers=1),
)
TINY_DINO = dict(img_size=28, depth=1, embed_dim=48, num_heads=2)


def digits(n=200):
    images, labels = load_digit_images()
    return images[:n], labels[:n]


def tiny_timm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: create_timm_encoder warns
        return TimmImageFeature("vit_small_patch14_dinov2", model_kwargs=TINY_DINO)


def three_metrics(feature=None, normalize=True, r=64):
    kwargs = dict(feature=feature, normalize=normalize) if feature is not None else {}
    return {
        "vendi": FKEAVendi(SIGMA, r, alpha=[1, 2], **kwargs),
        "finc": FINCNovelty(SIGMA, r, rho=2.0, **kwargs),
        "mmd": FastMMD(SIGMA, r, **kwargs),
    }


def feed(metrics, generated, real):
    metrics["vendi"].update(generated)
    for name in ("finc", "mmd") if "finc" in metrics else ("mmd",):
        metrics[name].update(real, real=True)
        metrics[name].update(generated, real=False)
    return {name: metric.reading().summary() for name, metric in metrics.items()}


def assert_same_summaries(first, second):
    for name in first:
        for key in first[name]:
            a, b = first[name][key], second[name][key]
            if isinstance(a, dict):
                assert all(torch.equal(a[k], b[k]) for k in a), (name, key)
            else:
                assert torch.equal(a, b), (name, key, a, b)


# ---------------------------------------------------------------------------------------------------------------
# images in
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make", [lambda: PixelImageFeature(8), lambda: ClipImageFeature(model_kwargs=TINY_CLIP), tiny_timm],
    ids=["pixels", "clip", "timm"],
)
def test_metrics_fed_images_equal_metrics_fed_the_embeddings(make):
    extractor = make()
    images, _ = digits(160)
    real, generated = images[:100], images[100:].flip(-1)  # mirrored digits: another distribution
    try:
        by_images = feed(three_metrics(extractor), generated, real)
    except RuntimeError as refused:  # the tiny random ViT embeds every image as one point: FINC refuses that
        assert "one point to the kernel" in str(refused)
        with pytest.raises(RuntimeError, match="one point to the kernel"):  # and so do its embeddings
            feed(three_metrics(), extractor(generated), extractor(real))
        with_images, with_embeddings = three_metrics(extractor), three_metrics()
        del with_images["finc"], with_embeddings["finc"]
        by_images = feed(with_images, generated, real)
        by_embeddings = feed(with_embeddings, extractor(generated), extractor(real))
    else:
        by_embeddings = feed(three_metrics(), extractor(generated), extractor(real))
    assert_same_summaries(by_images, by_embeddings)


def test_uint8_and_float_conventions_give_the_same_values():
    extractor = PixelImageFeature(8)
    as_uint8 = (digits(120)[0] * 255).round().to(torch.uint8)
    as_float = as_uint8.float() / 255
    uint8 = feed(three_metrics(extractor, normalize=False), as_uint8[60:], as_uint8[:60])
    floats = feed(three_metrics(extractor, normalize=True), as_float[60:], as_float[:60])
    assert_same_summaries(uint8, floats)


@pytest.mark.parametrize(
    "images, normalize, error, match",
    [
        (torch.rand(4, 1, 8, 8), False, TypeError, r"`features` has dtype torch.float32.*normalize=False.*uint8"),
        (torch.randint(0, 255, (4, 1, 8, 8), dtype=torch.uint8), True, TypeError, r"normalize=True expects float"),
        (torch.rand(4, 1, 8, 8) * 2 - 1, True, ValueError, r"\[0, 1\].*\(x \+ 1\) / 2"),
        (torch.rand(4, 1, 8, 8) * 255, True, ValueError, r"normalize=False"),
        (torch.full((4, 1, 8, 8), float("nan")), True, ValueError, r"NaN"),
        (torch.rand(4, 4, 8, 8), True, ValueError, r"`images` has 4 channels.*\[:, :3\]"),
        (torch.rand(4, 8, 8, 3), True, ValueError, r"channels first"),
        (torch.rand(1, 8, 8), True, ValueError, r"without a batch dimension.*\[None\]"),
        (torch.rand(4, 1, 4, 4), True, ValueError, r"smaller than the 8 x 8 cells.*size <= 4"),
    ],
)
def test_bad_images_name_the_argument_and_the_fix(images, normalize, error, match):
    metric = FKEAVendi(SIGMA, 16, feature=PixelImageFeature(8), normalize=normalize)
    with pytest.raises(error, match=match):
        metric.update(images)


def test_clip_and_timm_extractors_take_grey_images_of_any_size_and_refuse_other_channels():
    clip, dino = ClipImageFeature(model_kwargs=TINY_CLIP), tiny_timm()
    grey = torch.rand(2, 1, 8, 12)
    for extractor, width in ((clip, 16), (dino, 48)):
        z = extractor(grey)
        assert z.shape == (2, width) and torch.isfinite(z).all()
        torch.testing.assert_close(z, extractor(grey.expand(-1, 3, -1, -1)), rtol=0, atol=0)  # grey = repeated RGB
        with pytest.raises(ValueError, match="2 channels"):
            extractor(torch.rand(2, 2, 8, 8))
        with pytest.raises(ValueError, match=r"takes images in \[0, 1\]"):  # used on its own, e.g. by KID
            extractor(torch.rand(2, 3, 8, 8) * 255)
    # open_clip's preprocessing: 32 x 32, OpenAI mean / std
    prepared = clip.preprocess(torch.ones(1, 3, 8, 8))
    assert prepared.shape == (1, 3, 32, 32)
    torch.testing.assert_close(prepared[0, :, 0, 0], (1 - clip.mean.flatten()) / clip.std.flatten())
    assert torch.allclose(clip(grey).norm(dim=1), torch.ones(2))  # CLIP embeddings are L2-normalised


def test_the_extractor_is_frozen_hidden_and_follows_device_moves():
    extractor = ClipImageFeature(model_kwargs=TINY_CLIP)
    metric = FKEAVendi(SIGMA, 16, feature=extractor, normalize=True)
    assert list(metric.parameters()) == [] and all(not p.requires_grad for p in extractor.parameters())
    metric.train()
    assert not extractor.training and not any(m.training for m in extractor.modules())
    extractor.train()  # the extractor itself refuses training mode too
    assert not extractor.training
    metric.update(torch.rand(8, 3, 8, 8))
    assert not any(key.startswith("feature") for key in metric.state_dict())
    saved = FKEAVendi(SIGMA, 16, feature=ClipImageFeature(model_kwargs=TINY_CLIP), normalize=True, save_feature=True)
    assert any(key.startswith("feature.module.model.") for key in saved.state_dict())
    metric.double()  # dtype casts do not reach the extractor (embeddings stay float32)
    assert next(extractor.parameters()).dtype == torch.float32
    metric.to("meta")  # device moves do
    assert next(extractor.parameters()).device.type == "meta" and extractor.mean.device.type == "meta"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_extractor_follows_the_metric_to_the_gpu():
    metric = FKEAVendi(SIGMA, 16, feature=PixelImageFeature(8), normalize=True).to("cuda")
    metric.update(torch.rand(10, 1, 8, 8, device="cuda"))
    assert metric.compute().device.type == "cuda"


def test_image_feature_arguments_are_checked():
    with pytest.raises(ValueError, match="channels"):
        ImageFeature(torch.nn.Flatten(), channels=2)
    with pytest.raises(ValueError, match="mean"):
        ImageFeature(torch.nn.Flatten(), mean=(0.5, 0.5), std=(0.5, 0.5))
    with pytest.raises(ValueError, match="ClipImageFeature: `model`"):
        ClipImageFeature(model=torch.nn.Linear(2, 2))


# ---------------------------------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------------------------------


def vae_sampler(module, n, generator):
    return module.sample(n, generator=generator)


def test_sharded_sampling_gives_the_same_samples_for_any_world_size():
    model = DigitsVAE(hidden=32, n_components=5)

    def union(world):
        parts = [draw for rank in range(world) for draw in draw_samples(vae_sampler, model, 530, 100, 7, rank, world)]
        ids = torch.cat([ids for ids, _ in parts])
        images = torch.cat([images for _, images in parts])
        return images[ids.argsort()], ids.sort().values

    single, ids = union(1)
    assert ids.tolist() == list(range(530))
    for world in (2, 3):
        images, ids = union(world)
        assert ids.tolist() == list(range(530))
        torch.testing.assert_close(images, single, rtol=0, atol=0)
    assert [size for _, _, size in sample_chunks(530, 100)] == [100] * 5 + [30]


def test_a_sampler_returning_the_wrong_count_is_reported():
    with pytest.raises(ValueError, match="must return a tensor of 10 images"):
        next(draw_samples(lambda module, n, g: torch.rand(n + 1, 1, 8, 8), None, 10, 10, 0))


# ---------------------------------------------------------------------------------------------------------------
# the callback
# ---------------------------------------------------------------------------------------------------------------

N_SAMPLES, CHUNK, R = 300, 100, 64


def make_callback(**kwargs):
    metrics = three_metrics(r=R)
    metrics["finc"].reset_real_features = False
    metrics["mmd"].reset_real_features = False
    options = dict(
        feature=PixelImageFeature(8),
        references={"finc": "reference_dataloader", "mmd": "val_dataloader"},
        n_samples=N_SAMPLES,
        sample_batch_size=CHUNK,
        seed=3,
        label_key="label",
        gallery_modes=2,
        gallery_per_mode=4,
        max_gallery_images=200,
    )
    options.update(kwargs)
    return GeneratedSamples(metrics, **options)


def trainer_for(tmp_path, callback, logger=True, **kwargs):
    kwargs = {"num_sanity_val_steps": 0, "callbacks": [callback], **kwargs}
    return quiet_trainer(tmp_path, logger=logger, **kwargs)


def tiny_vae(seed=0):
    torch.manual_seed(seed)
    return DigitsVAE(hidden=32, n_components=5, noise_seed=seed)


def by_hand(module, data):
    """The callback's numbers, computed directly from the same seeded samples and the datamodule's loaders."""
    feature = PixelImageFeature(8)
    metrics = three_metrics(r=R)
    images = torch.cat([images for _, images in draw_samples(vae_sampler, module, N_SAMPLES, CHUNK, 3)])
    reference = torch.cat([batch["image"] for batch in data.reference_dataloader()])
    held_out = torch.cat([batch["image"] for batch in data.val_dataloader()])
    metrics["vendi"].update(feature(images))
    metrics["finc"].update(feature(reference), real=True)
    metrics["finc"].update(feature(images), real=False)
    metrics["mmd"].update(feature(held_out), real=True)
    metrics["mmd"].update(feature(images), real=False)
    summaries = {name: metric.reading().summary() for name, metric in metrics.items()}
    vendi, finc, mmd = summaries["vendi"], summaries["finc"], summaries["mmd"]
    values = {f"vendi/vendi_{order}": float(v) for order, v in vendi[""].items()}  # the headline: each order,
    values.update({f"vendi/vendi_{order}_se": float(v) for order, v in vendi["se"].items()})  # with its se
    values.update({
        "finc/novel_score": float(finc[""]), "finc/novel_score_se": float(finc["se"]),
        "finc/missing_score": float(finc["missing"]), "finc/missing_score_se": float(finc["missing_se"]),
        "finc/novel_modes": float(finc["novel_modes"]), "finc/missing_modes": float(finc["missing_modes"]),
        "finc/novel_modes_se": float(finc["novel_modes_se"]), "finc/missing_modes_se": float(finc["missing_modes_se"]),
        "finc/novel_top_minus_log10_p": -math.log10(float(finc["novel_top_p_value"])),
        "finc/missing_top_minus_log10_p": -math.log10(float(finc["missing_top_p_value"])),
        "mmd/mmd2": float(mmd[""]), "mmd/mmd2_se": float(mmd["se"]),
        "mmd/minus_log10_p": -math.log10(float(mmd["p_value"])),
    })
    for name, summary in summaries.items():  # and with log_detail every value of the summary
        for key, v in summary.items():
            values.update(flatten_values(f"{name}/detail/{key or 'value'}", v))
    return values


def test_logged_values_equal_the_metrics_and_pictures_reach_tensorboard(tmp_path):
    module, data, callback = tiny_vae(), DigitsImages(batch_size=64), make_callback(log_detail=True)
    trainer = trainer_for(tmp_path, callback, limit_train_batches=3)
    trainer.fit(module, datamodule=data)
    want = by_hand(module.eval(), data)
    assert set(want) == set(callback.last_values)
    for name, value in want.items():
        assert callback.last_values[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
        assert float(trainer.callback_metrics[f"gen/{name}"]) == pytest.approx(value, rel=1e-6, abs=1e-9), name
    assert want["finc/missing_modes"] > 0  # a barely trained VAE misses modes: the missing gallery is exercised
    events = EventAccumulator(str(trainer.logger.log_dir), size_guidance={"images": 0})
    events.Reload()
    tags = set(events.Tags()["images"])
    pictures = {"gen/vendi/modes", "gen/finc/missing", "gen/vendi/spectrum", "gen/finc/spectrum", "gen/mmd/over_epochs"}
    assert pictures <= tags
    assert ("gen/finc/novel" in tags) == (want["finc/novel_modes"] > 0)  # no novelty gallery without a novel mode
    missing = callback.last_galleries["finc/missing"]
    assert missing.labels[0].startswith("missing region 1: class ") and missing.images[0].shape[1:] == (1, 8, 8)
    row_share = float(trainer.callback_metrics["gen/finc/detail/missing_share/0"])  # the row's share (log_detail)
    assert f"about {100 * row_share:.0f} % of the reference" in missing.labels[0]
    assert float(trainer.callback_metrics["gen/finc/detail/missing_share_se/0"]) > 0
    assert missing.classes[0] is not None and len(missing.classes[0]) == len(missing.images[0])
    real = torch.cat([batch["image"] for batch in data.reference_dataloader()])
    real_labels = torch.cat([batch["label"] for batch in data.reference_dataloader()])
    for image, label in zip(missing.images[0], missing.classes[0]):
        match = (real == image).flatten(1).all(1)
        assert bool(match.any()) and int(real_labels[match][0]) == int(label)  # kept real images, their classes
    assert callback.metrics["vendi"].sample_count() == 0  # the generated side is reset after logging
    assert callback.metrics["finc"].sample_count(real=True) == len(data.train_set)  # the reference is kept


def test_reference_cached_and_resume_continues_exactly(tmp_path):
    data_kwargs = dict(batch_size=128, drop_classes=[3], drop_after_epoch=1)

    def run(folder, max_epochs, ckpt_path=None):
        callback = make_callback(galleries=False)
        checkpoints = ModelCheckpoint(dirpath=folder, save_top_k=-1, every_n_epochs=1, filename="{epoch}")
        trainer = trainer_for(folder, callback, max_epochs=max_epochs, deterministic=True, logger=False,
                              enable_checkpointing=True, callbacks=[callback, checkpoints], limit_train_batches=4)
        trainer.fit(tiny_vae(), datamodule=DigitsImages(**data_kwargs), ckpt_path=ckpt_path)
        return callback

    whole = run(tmp_path / "whole", 3)
    assert sorted(whole.history) == [0, 1, 2] and whole.reference_passes == 2  # each reference embedded once
    resumed = run(tmp_path / "resumed", 3, ckpt_path=tmp_path / "whole" / "epoch=0.ckpt")
    assert resumed.reference_passes == 0  # the cached reference sides came back from the checkpoint
    assert resumed.history == whole.history  # epoch 0 restored, epochs 1 and 2 recomputed: bit for bit
    # the FastMMD picture of the resumed run draws every epoch, the restored one included
    tag, figure = resumed.test_history("mmd", 2, 0.05, resumed.history[2])
    statistic, p_value = (axis.lines[0] for axis in figure.axes)
    assert tag == "over_epochs" and list(statistic.get_xdata()) == [0, 1, 2]
    p_values = [10 ** -whole.history[e]["mmd/minus_log10_p"] for e in range(3)]  # logged as -log10 p, drawn as p
    assert list(p_value.get_ydata()) == pytest.approx([max(p, 1e-16) for p in p_values])
    assert whole.history[2] != whole.history[0]


def test_every_n_epochs_and_the_last_epoch(tmp_path):
    callback = make_callback(galleries=False, every_n_epochs=2)
    trainer_for(tmp_path, callback, max_epochs=3, logger=False, limit_train_batches=1).fit(
        tiny_vae(), datamodule=DigitsImages(batch_size=256)
    )
    assert sorted(callback.history) == [1, 2]  # epochs 2 and 3 (counted from 1): every 2nd and the last


def test_configuration_errors(tmp_path):
    pixels = PixelImageFeature(8)
    with pytest.raises(ValueError, match=r"`references`.*missing \['finc'\]"):
        GeneratedSamples({"finc": FINCNovelty(SIGMA, 16)}, feature=pixels)
    with pytest.raises(ValueError, match="own `feature`"):
        GeneratedSamples({"vendi": FKEAVendi(SIGMA, 16, feature=pixels)}, feature=pixels)
    with pytest.raises(ValueError, match="metrics"):
        GeneratedSamples({}, feature=pixels)
    with pytest.raises(ValueError, match="n_samples"):
        GeneratedSamples({"vendi": FKEAVendi(SIGMA, 16)}, feature=pixels, n_samples=0)
    with pytest.raises(ValueError, match="`galleries`"):
        GeneratedSamples({"vendi": FKEAVendi(SIGMA, 16)}, feature=pixels, galleries=["finc"])
    callback = GeneratedSamples({"vendi": FKEAVendi(SIGMA, 16)}, feature=pixels, sample="draw")
    with pytest.raises(ValueError, match="`sample`='draw' names no method of DigitsVAE"):
        trainer_for(tmp_path, callback, logger=False).fit(tiny_vae(), datamodule=DigitsImages())


def test_two_processes_log_what_one_process_logs(tmp_path):
    module, data = tiny_vae(), DigitsImages(batch_size=64)
    logged = {}
    for devices in (1, 2):
        callback = make_callback(max_gallery_images=100)
        strategy = "ddp_spawn" if devices == 2 else "auto"
        trainer = trainer_for(tmp_path / str(devices), callback, devices=devices, strategy=strategy, logger=False)
        trainer.validate(module, datamodule=data, verbose=False)
        logged[devices] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("gen/")}
    # the headline: FKEA's two orders and FINC's two scores with their se (8), FINC's two counts with theirs and two
    # top p-values (6), FastMMD's MMD^2, se and p-value (3); no constant, no per-row value
    assert len(logged[1]) == 17 and set(logged[1]) == set(logged[2])
    assert sum(name.endswith("_se") for name in logged[1]) == 7
    # The decoder and the extractor run in float32 on shards of another batch size, so embeddings differ in
    # the 7th digit (BLAS blocking); Vendi near 1 turns that into ~2e-6. A wrong shard or a lost row moves
    # these values by percents.
    # The standard errors' multipliers vary at sigma / 100, so they feel those 7th digits about 100x more (2e-5
    # measured on vendi_se/1): a standard error needs no more than 3 digits, and one near 0 (a gallery row's share
    # se of 1.5e-6: a share near 0) none below 1e-6.
    for name, value in logged[1].items():
        rel, tiny = (1e-3, 1e-6) if "_se" in name else (1e-5, 1e-9)
        assert logged[2][name] == pytest.approx(value, rel=rel, abs=tiny), name


# ---------------------------------------------------------------------------------------------------------------
# the recipe (recipes/generative.py), shortened
# ---------------------------------------------------------------------------------------------------------------


def short_config(tmp_path, name, epochs, drop_after=None, r=256):
    config = yaml.safe_load((ROOT / "recipes" / "configs" / f"generative_{name}.yaml").read_text())
    config["trainer"]["max_epochs"] = epochs
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)
    generated = config["trainer"]["callbacks"][1]["init_args"]
    for metric in generated["metrics"].values():
        metric["init_args"]["n_frequencies"] = r
    generated["every_n_epochs"] = epochs
    if drop_after is not None:
        config["data"]["drop_after_epoch"] = drop_after
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def recipe_main():
    sys.path.insert(0, str(ROOT / "recipes"))
    from generative import main

    return main


def test_the_recipe_runs_and_prints_its_summary(tmp_path, capsys):
    result = recipe_main()(["--config", str(short_config(tmp_path, "collapse", 1, drop_after=0, r=64)),
                            "--kid_subsets", "5", "--kid_subset_size", "100"])
    out, err = capsys.readouterr()
    assert "\r" not in out + err and "epoch 0 (1 of 1) done" in err  # progress on stderr, quiet lines (not a terminal)
    assert "FINC missing modes after 1 epoch:" in out and "KID mean" in out and "Vendi-1" in out
    row = result["epochs"][-1]
    assert row["epoch"] == 1 and {"vendi", "rke", "novel", "missing", "mmd", "p_value", "kid"} <= set(row)
    assert Path(result["log_dir"], "summary.json").exists()


@pytest.mark.slow
def test_collapse_names_the_dropped_digits_and_the_normal_run_reports_no_mode(tmp_path, capsys):
    main = recipe_main()
    kid = ["--kid_subsets", "20"]
    normal = main(["--config", str(short_config(tmp_path, "normal", 60))] + kid)
    collapse = main(["--config", str(short_config(tmp_path, "collapse", 60, drop_after=20))] + kid)
    out = capsys.readouterr().out
    last_normal, last_collapse = normal["epochs"][-1], collapse["epochs"][-1]
    assert last_normal["novel"] == 0 and last_normal["missing"] == 0, out
    missing = collapse["modes"]["missing"]
    assert last_collapse["missing"] >= 2 and len(missing) >= 2, out
    top = torch.tensor(missing[0]["classes"] + missing[1]["classes"])
    assert float(torch.isin(top, torch.tensor([3, 7])).float().mean()) >= 0.9, out
    assert {missing[0]["shows"][0], missing[1]["shows"][0]} == {"3", "7"}, out
    assert last_collapse["vendi"] < last_normal["vendi"], out
    assert last_collapse["kid"] > last_normal["kid"], out  # KID sees it too, as one number


# ---------------------------------------------------------------------------------------------------------------
# conditional generators
# ---------------------------------------------------------------------------------------------------------------


def conditional_metrics():
    from lightning_spectral.metrics import ConditionalVendi

    return {
        "vendi": FKEAVendi(0.3, R, alpha=[1, 2]),  # a narrow kernel: a barely trained model's samples vary a little
        "cond": ConditionalVendi(0.3, 0.1, R, alpha=[1, 2], num_classes=10, per_prompt_frequencies=32),
    }


def test_a_conditional_generator_is_sampled_per_prompt_and_the_collapsed_prompt_is_named(tmp_path):
    from digits_vae import ConditionalDigitsVAE

    torch.manual_seed(0)
    module = ConditionalDigitsVAE(hidden=32, collapse_prompts=[3], collapse_after_epoch=1)
    prompts = torch.arange(10)
    callback = GeneratedSamples(
        conditional_metrics(), feature=PixelImageFeature(8), prompts=prompts, n_samples=250, sample_batch_size=60,
        seed=5, gallery_modes=2, gallery_per_mode=4, max_gallery_images=250, log_detail=True,
    )
    # whole epochs: 1,438 training digits in batches of 100 (the last one holds 38); samples in chunks of 60 (+ 10)
    trainer = trainer_for(tmp_path, callback, max_epochs=2)
    trainer.fit(module, datamodule=DigitsImages(batch_size=100))
    assert sorted(callback.history) == [0, 1]
    before, after = callback.history[0], callback.history[1]
    assert after["cond/detail/prompt/3"] == pytest.approx(1.0, abs=1e-6)
    assert before["cond/detail/prompt/3"] > 1.2  # before the switch the prompt varied, the others still do
    assert min(after[f"cond/detail/prompt/{label}"] for label in range(10) if label != 3) > 1.5
    assert after["cond/min_prompt_vendi"] == pytest.approx(1.0, abs=1e-6)
    gallery = callback.last_galleries["cond/least_diverse_prompts"]
    assert gallery.labels[0].startswith("prompt 3: Vendi 1.00 over 25 samples")
    assert len(gallery.images[0]) == 4 and all(torch.equal(image, gallery.images[0][0]) for image in gallery.images[0])
    # the logged numbers are the metrics' of the same seeded samples, each drawn for prompt (id % 10)
    metrics = conditional_metrics()
    chunks = draw_samples(lambda m, p, g: m.sample(p, generator=g), module.eval(), 250, 60, 5,
                          prompts_for=lambda ids: prompts[ids % 10])
    for ids, images in chunks:
        z = PixelImageFeature(8)(images)
        metrics["vendi"].update(z)
        metrics["cond"].update(z, prompts[ids % 10])
    want = {}
    for name, metric in metrics.items():
        reading = metric.reading()
        want.update(logged_values(name, reading.headline(), reading.summary(), detail=True))
    want = {key: value for key, value in want.items() if math.isfinite(value)}
    assert set(want) == set(callback.last_values)
    # the headline: each order's conditional and information scores with their se, and the least diverse prompt's
    logged = {f"cond/{key}_{order}{se}" for key in ("conditional", "information") for order in (1, 2) for se in ("", "_se")}
    assert logged | {"cond/min_prompt_vendi", "cond/min_prompt_vendi_se"} <= set(want)
    for key, value in want.items():
        assert callback.last_values[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_conditional_configuration_errors():
    from lightning_spectral.metrics import ConditionalVendi

    pixels = PixelImageFeature(8)
    with pytest.raises(ValueError, match="pass `prompts=`"):
        GeneratedSamples({"cond": ConditionalVendi(SIGMA, 0.1, 16)}, feature=pixels)
    with pytest.raises(ValueError, match=r"`prompts` must be \(P,\) integer labels or \(P, d\)"):
        GeneratedSamples({"cond": ConditionalVendi(SIGMA, 0.1, 16)}, feature=pixels, prompts=torch.rand(10))
    with pytest.raises(ValueError, match="`prompt_embeddings` must be a finite float tensor"):
        GeneratedSamples({"cond": ConditionalVendi(SIGMA, 0.1, 16)}, feature=pixels, prompts=torch.arange(3),
                         prompt_embeddings=torch.rand(4, 2))
