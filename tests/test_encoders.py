"""Encoders and reference features: safe local loading (open_clip, timm, feature tables), offline."""

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from lightning_spectral.encoders import (
    ImageTower,
    PixelEncoder,
    PrecomputedFeatures,
    TextTower,
    TimmReference,
    create_clip,
    create_timm_encoder,
    load_weights,
    save_features,
)

TINY = dict(
    embed_dim=16,
    vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
    text_cfg=dict(context_length=8, width=32, heads=2, layers=1),
)
DINO = dict(img_size=28, depth=2, embed_dim=48, num_heads=2)
UNPICKLED = []


class Payload:
    """An arbitrary object: unpickling it would record itself in UNPICKLED."""

    def __init__(self):
        self.secret = "ran"

    def __setstate__(self, state):
        UNPICKLED.append(state)


def clip_outputs(model, seed=0):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(3, 3, 32, 32, generator=generator)
    tokens = torch.randint(1, 1000, (3, 8), generator=generator)
    model.eval()
    with torch.no_grad():
        return model.encode_image(images), model.encode_text(tokens)


def fresh_clip(seed, **overrides):
    torch.manual_seed(seed)
    return create_clip("ViT-B-32", **{**TINY, **overrides})


@pytest.fixture(scope="module")
def saved_clip(tmp_path_factory):
    """A random tiny CLIP, its outputs, and its weights as .pt and .safetensors."""
    model = fresh_clip(0).model
    folder = tmp_path_factory.mktemp("clip")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save(state, folder / "clip.pt")
    save_file(state, str(folder / "clip.safetensors"))
    return model, clip_outputs(model), folder


# ---------------------------------------------------------------------------------------------------------------
# open_clip
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["clip.pt", "clip.safetensors"])
def test_create_clip_loads_a_local_checkpoint_exactly(saved_clip, name):
    source, (image, text), folder = saved_clip
    other = fresh_clip(1).model  # another random init: differs, so equality below is the loading's doing
    assert not torch.allclose(clip_outputs(other)[0], image)
    model, preprocess_train, preprocess_val, tokenizer = fresh_clip(1, pretrained=str(folder / name))
    loaded_image, loaded_text = clip_outputs(model)
    torch.testing.assert_close(loaded_image, image, rtol=0, atol=0)
    torch.testing.assert_close(loaded_text, text, rtol=0, atol=0)
    assert tokenizer(["a photo of the digit 1"]).shape == (1, 8)  # the model's context length
    from PIL import Image

    assert preprocess_val(Image.new("RGB", (50, 40))).shape == (3, 32, 32)
    assert preprocess_train(Image.new("RGB", (50, 40))).shape == (3, 32, 32)


def test_open_clip_training_checkpoint_with_module_prefixes(saved_clip, tmp_path):
    source, (image, _), _ = saved_clip
    optimizer = torch.optim.AdamW(source.parameters())
    checkpoint = {
        "epoch": 3,
        "name": "run",
        "state_dict": {"module." + k: v for k, v in source.state_dict().items()},
        "optimizer": optimizer.state_dict(),
    }
    torch.save(checkpoint, tmp_path / "epoch_3.pt")
    model = fresh_clip(2, pretrained=tmp_path / "epoch_3.pt").model  # a Path works as well as a str
    torch.testing.assert_close(clip_outputs(model)[0], image, rtol=0, atol=0)


def test_lightning_checkpoint_prefix(saved_clip, tmp_path):
    source, (image, _), _ = saved_clip
    torch.save({"state_dict": {"model." + k: v for k, v in source.state_dict().items()}}, tmp_path / "last.ckpt")
    with pytest.raises(ValueError, match="checkpoint_prefix"):
        fresh_clip(2, pretrained=str(tmp_path / "last.ckpt"))
    model = fresh_clip(2, pretrained=str(tmp_path / "last.ckpt"), checkpoint_prefix="model.").model
    torch.testing.assert_close(clip_outputs(model)[0], image, rtol=0, atol=0)
    with pytest.raises(ValueError, match="prefix 'student.'"):
        fresh_clip(2, pretrained=str(tmp_path / "last.ckpt"), checkpoint_prefix="student.")


def test_mismatching_checkpoints_are_reported_with_the_file(saved_clip):
    _, _, folder = saved_clip
    path = str(folder / "clip.pt")
    deeper = dict(TINY, vision_cfg=dict(TINY["vision_cfg"], layers=2))
    with pytest.raises(ValueError, match=r"clip\.pt.*missing from the file") as error:
        fresh_clip(0, pretrained=path, **deeper)
    assert "resblocks.1" in str(error.value)
    wider = dict(TINY, embed_dim=24)
    with pytest.raises(ValueError, match=r"clip\.pt.*other shapes"):
        fresh_clip(0, pretrained=path, **wider)


def test_position_embeddings_are_resized_to_the_image_size(saved_clip):
    source, (_, text), folder = saved_clip
    larger = dict(TINY, vision_cfg=dict(TINY["vision_cfg"], image_size=64))
    model = fresh_clip(3, pretrained=str(folder / "clip.safetensors"), **larger).model
    assert model.visual.positional_embedding.shape[0] == (64 // 16) ** 2 + 1
    assert model.encode_image(torch.zeros(1, 3, 64, 64)).shape == (1, 16)
    generator = torch.Generator().manual_seed(0)
    torch.randn(3, 3, 32, 32, generator=generator)  # the draws clip_outputs makes before its tokens
    tokens = torch.randint(1, 1000, (3, 8), generator=generator)
    with torch.no_grad():
        torch.testing.assert_close(model.eval().encode_text(tokens), text, rtol=0, atol=0)  # text tower untouched


def test_pickled_objects_are_refused_without_running_them(saved_clip, tmp_path, monkeypatch):
    import pickle

    import open_clip

    pickle.loads(pickle.dumps(Payload()))  # the sentinel works: unpickling records itself
    assert UNPICKLED == [{"secret": "ran"}]
    UNPICKLED.clear()
    opened = []  # open_clip's reader falls back to torch.load without weights_only on a TypeError: never reach it
    monkeypatch.setattr(open_clip, "load_checkpoint", lambda *args, **kwargs: opened.append(args))
    source, _, _ = saved_clip
    torch.save({"state_dict": source.state_dict(), "extra": Payload()}, tmp_path / "unsafe.pt")
    torch.save(Payload(), tmp_path / "object.pt")
    for name in ("unsafe.pt", "object.pt"):
        with pytest.raises(ValueError, match="refused to load"):
            fresh_clip(0, pretrained=str(tmp_path / name))
    assert UNPICKLED == [] and opened == []


def test_open_clip_loads_plain_checkpoints_and_wrapped_ones_are_loaded_here(saved_clip, tmp_path, monkeypatch):
    import open_clip

    source, (image, text), folder = saved_clip
    calls = []
    library = open_clip.load_checkpoint
    monkeypatch.setattr(
        open_clip, "load_checkpoint", lambda *args, **kwargs: calls.append(kwargs) or library(*args, **kwargs)
    )
    fresh_clip(1, pretrained=str(folder / "clip.safetensors"))
    assert calls == [dict(strict=True, weights_only=True)]
    # torch.compile's `_orig_mod.` inside DDP's `module.`, and timm's {"model": ...}: open_clip's reader knows neither
    compiled = {"module._orig_mod." + k: v for k, v in source.state_dict().items()}
    torch.save(compiled, tmp_path / "compiled.pt")
    torch.save({"model": source.state_dict(), "epoch": 2}, tmp_path / "timm_style.pth")
    for name in ("compiled.pt", "timm_style.pth"):
        model = fresh_clip(2, pretrained=str(tmp_path / name)).model
        loaded_image, loaded_text = clip_outputs(model)
        torch.testing.assert_close(loaded_image, image, rtol=0, atol=0)
        torch.testing.assert_close(loaded_text, text, rtol=0, atol=0)
    assert len(calls) == 1


def test_pretrained_arguments_that_cannot_work_offline(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="no file at"):
        create_clip("ViT-B-32", pretrained=str(tmp_path / "missing.pt"), **TINY)
    (tmp_path / "weights.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="supported: .safetensors"):
        create_clip("ViT-B-32", pretrained=str(tmp_path / "weights.npz"), **TINY)
    with pytest.raises(ValueError, match="neither an existing file nor an open_clip tag"):
        create_clip("ViT-B-32", pretrained="no_such_tag", **TINY)

    import open_clip.factory

    def no_hub(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(open_clip.factory, "download_pretrained", no_hub)
    with pytest.raises(RuntimeError, match="pass its local path as `pretrained`"):
        create_clip("ViT-B-32", pretrained="openai")


def test_towers_match_the_model_and_can_be_hooked(saved_clip):
    model, (image, text), _ = saved_clip
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(3, 3, 32, 32, generator=generator)
    tokens = torch.randint(1, 1000, (3, 8), generator=generator)
    image_tower, text_tower = ImageTower(model).eval(), TextTower(model, normalize=True).eval()
    seen = []
    image_tower.register_forward_hook(lambda module, inputs, output: seen.append(output))
    with torch.no_grad():
        torch.testing.assert_close(image_tower(images), image)
        z = text_tower(tokens)
    assert len(seen) == 1 and seen[0].shape == (3, 16)
    torch.testing.assert_close(z, torch.nn.functional.normalize(text, dim=-1))
    assert image_tower.model is model  # a submodule: .to() / .eval() / requires_grad_ reach the model
    with pytest.raises(ValueError, match="encode_image"):
        ImageTower(torch.nn.Linear(2, 2))


def test_a_tower_can_borrow_the_model_without_repeating_its_weights(saved_clip):
    model = saved_clip[0]
    holder = torch.nn.Module()
    holder.model = model
    holder.image_tower = ImageTower(model, normalize=True, owns_model=False)
    assert not any(key.startswith("image_tower.") for key in holder.state_dict())
    assert holder.get_submodule("image_tower").model is model  # still hookable by name, same weights
    with torch.no_grad():
        torch.testing.assert_close(holder.image_tower(torch.zeros(2, 3, 32, 32)).norm(dim=1), torch.ones(2))


def test_pixel_encoder_recovers_the_digits_pixels():
    from sklearn.datasets import load_digits

    from lightning_spectral.data import RenderDigit

    pixels = torch.tensor(load_digits().images[:20], dtype=torch.float32)  # (20, 8, 8), values 0-16
    images = torch.stack([RenderDigit(32, (0.5,) * 3, (0.25,) * 3)(p) for p in pixels])
    z = PixelEncoder(size=8)(images)
    centred = (pixels / 16).flatten(1) - (pixels / 16).flatten(1).mean(1, keepdim=True)
    # rendering (bilinear x4) then pooling (average /4) smooths a little: near-identical directions
    cosine = torch.nn.functional.cosine_similarity(z, centred, dim=1)
    assert float(cosine.min()) > 0.95
    projection = torch.randn(64, 5)
    offset = torch.randn(64)
    torch.testing.assert_close(PixelEncoder(8, projection, offset)(images), (z - offset) @ projection)
    with pytest.raises(ValueError, match="`projection` must have 64 rows"):
        PixelEncoder(8, torch.randn(10, 5))
    with pytest.raises(ValueError, match="expects images"):
        PixelEncoder(8)(torch.randn(4, 64))
    with pytest.raises(ValueError, match="`size` must be an integer >= 1"):
        PixelEncoder(0)


def test_timm_reference_is_the_frozen_timm_encoder(tmp_path):
    source = random_dino().eval()
    path = tmp_path / "dinov2.safetensors"
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    reference = TimmReference("vit_small_patch14_dinov2", weights=str(path), model_kwargs=DINO)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(reference(x), source(x), rtol=0, atol=0)
    assert not any(p.requires_grad for p in reference.parameters())


def test_load_weights_unwraps_and_validates(tmp_path):
    torch.save({"model": {"_orig_mod.module.w": torch.ones(2)}, "epoch": 1}, tmp_path / "timm.pth")
    assert list(load_weights(tmp_path / "timm.pth")) == ["w"]
    torch.save([torch.ones(2)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="not a state_dict"):
        load_weights(tmp_path / "list.pt")
    (tmp_path / "broken.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_weights(tmp_path / "broken.safetensors")


# ---------------------------------------------------------------------------------------------------------------
# timm
# ---------------------------------------------------------------------------------------------------------------


def random_dino(seed=0, **overrides):
    import timm

    torch.manual_seed(seed)
    return timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0, **{**DINO, **overrides})


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_timm_encoder_from_a_local_weights_file(tmp_path, suffix):
    source = random_dino().eval()
    path = tmp_path / f"dinov2{suffix}"
    if suffix == ".safetensors":
        save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    else:
        torch.save(source.state_dict(), path)
    torch.manual_seed(5)
    encoder, transform, config = create_timm_encoder("vit_small_patch14_dinov2", weights=path, **DINO)
    x = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        expected = source(x)
    assert not torch.allclose(random_dino(seed=5).eval()(x), expected)
    torch.testing.assert_close(encoder(x), expected, rtol=0, atol=0)
    assert expected.shape == (2, 48)
    assert not encoder.training and not any(p.requires_grad for p in encoder.parameters())
    assert config["input_size"] == (3, 28, 28) and config["mean"] == pytest.approx((0.485, 0.456, 0.406))
    from PIL import Image

    assert transform(Image.new("RGB", (40, 30))).shape == (3, 28, 28)


def test_timm_encoder_drops_a_classifier_and_resamples_position_embeddings(tmp_path):
    import timm

    torch.manual_seed(0)
    classifier = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, depth=1)
    classifier.eval()
    torch.save({"state_dict": classifier.state_dict()}, tmp_path / "vit.pth")
    encoder = create_timm_encoder("vit_tiny_patch16_224", weights=tmp_path / "vit.pth", img_size=32, depth=1).model
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        pooled = classifier.forward_head(classifier.forward_features(x), pre_logits=True)
    torch.testing.assert_close(encoder(x), pooled, rtol=0, atol=0)
    larger = create_timm_encoder("vit_tiny_patch16_224", weights=tmp_path / "vit.pth", img_size=64, depth=1).model
    assert larger.pos_embed.shape[1] == (64 // 16) ** 2 + 1
    assert larger(torch.randn(1, 3, 64, 64)).shape == (1, 192)


def test_timm_encoder_errors(tmp_path):
    torch.save(random_dino().state_dict(), tmp_path / "dino.pt")
    with pytest.raises(ValueError, match=r"dino\.pt.*missing from the file"):
        create_timm_encoder("vit_small_patch14_dinov2", weights=tmp_path / "dino.pt", **dict(DINO, depth=3))
    with pytest.raises(ValueError, match=r"dino\.pt.*size mismatch"):
        create_timm_encoder("vit_small_patch14_dinov2", weights=tmp_path / "dino.pt", **dict(DINO, embed_dim=64))
    torch.save({"state_dict": random_dino().state_dict(), "extra": Payload()}, tmp_path / "unsafe.pt")
    with pytest.raises(ValueError, match="refused to load"):
        create_timm_encoder("vit_small_patch14_dinov2", weights=tmp_path / "unsafe.pt", **DINO)
    assert UNPICKLED == []
    with pytest.raises(ValueError, match="not a timm architecture"):
        create_timm_encoder("no_such_model", weights=tmp_path / "dino.pt")
    with pytest.raises(FileNotFoundError, match="no file at"):
        create_timm_encoder("vit_small_patch14_dinov2", weights=tmp_path / "missing.safetensors", **DINO)
    with pytest.warns(UserWarning, match="randomly initialised"):
        create_timm_encoder("vit_small_patch14_dinov2", **DINO)


def test_timm_encoder_input_adapter_converts_clip_normalised_batches(tmp_path):
    from lightning_spectral.data import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    source = random_dino().eval()
    torch.save(source.state_dict(), tmp_path / "dino.pt")
    encoder = create_timm_encoder(
        "vit_small_patch14_dinov2",
        weights=tmp_path / "dino.pt",
        input_mean=OPENAI_DATASET_MEAN,
        input_std=OPENAI_DATASET_STD,
        input_size=28,
        **DINO,
    ).model
    pixels = torch.rand(2, 3, 32, 32)  # [0, 1] images at the CLIP model's size
    clip_input = (pixels - torch.tensor(OPENAI_DATASET_MEAN).view(3, 1, 1)) / torch.tensor(OPENAI_DATASET_STD).view(
        3, 1, 1
    )
    resized = torch.nn.functional.interpolate(pixels, size=28, mode="bicubic", antialias=True)
    imagenet_input = (resized - torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)) / torch.tensor(
        (0.229, 0.224, 0.225)
    ).view(3, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(encoder(clip_input), source(imagenet_input), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="both `input_mean` and `input_std`"):
        create_timm_encoder("vit_small_patch14_dinov2", weights=tmp_path / "dino.pt", input_mean=(0.5,), **DINO)
    with pytest.raises(ValueError, match="`input_std` must be > 0"):
        create_timm_encoder("vit_small_patch14_dinov2", input_mean=(0.5,), input_std=(0.0,), **DINO)
    with pytest.raises(ValueError, match="`input_mean` must be 1 or 3 finite numbers"):
        create_timm_encoder("vit_small_patch14_dinov2", input_mean=(0.5, 0.5), input_std=(0.2,), **DINO)
    with pytest.raises(ValueError, match="`num_classes` must be an integer >= 0"):
        create_timm_encoder("vit_small_patch14_dinov2", num_classes=-1, **DINO)


# ---------------------------------------------------------------------------------------------------------------
# precomputed features
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npy", ".pt", ".safetensors"])
@pytest.mark.parametrize("indexed", [False, True])
def test_precomputed_features_round_trip(tmp_path, suffix, indexed):
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(20, 5, generator=generator)
    index = 100 + 3 * torch.randperm(20, generator=generator) if indexed else None
    path = tmp_path / f"ref{suffix}"
    save_features(path, features, index=index)
    table = PrecomputedFeatures(path)
    assert table.shape == ((int(index.max()) + 1 if indexed else 20), 5) and len(table) == 20
    assert table.memory_mapped == (suffix == ".npy")
    if indexed:
        ids = index[[4, 0, 19, 4]]
        expected = features[[4, 0, 19, 4]]
        with pytest.raises(KeyError, match="have no features"):
            table[torch.tensor([101])]  # not a multiple of 3 past 100: no row
    else:
        ids = torch.tensor([4, 0, 19, 4])
        expected = features[ids]
    looked_up = table[ids]
    assert looked_up.dtype == torch.float32
    torch.testing.assert_close(looked_up, expected, rtol=0, atol=0)
    torch.testing.assert_close(table[int(ids[1])], expected[1], rtol=0, atol=0)  # a single id: (d,)
    torch.testing.assert_close(table[ids.numpy()], expected, rtol=0, atol=0)
    with pytest.raises(KeyError, match="have no features"):
        table[[10_000]]


def test_npy_is_memory_mapped_and_nan_is_found_per_lookup(tmp_path):
    features = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float64)
    features[7, 2] = np.nan
    np.save(tmp_path / "ref.npy", features)
    table = PrecomputedFeatures(tmp_path / "ref.npy")  # no full scan of a memory-mapped file
    assert isinstance(table._data, np.memmap)
    rows = table[[0, 8, 49]]
    assert rows.dtype == torch.float64
    torch.testing.assert_close(rows, torch.from_numpy(features[[0, 8, 49]]))
    with pytest.raises(ValueError, match="NaN or Inf at rows \\[7\\]"):
        table[[3, 7]]


def test_big_endian_npy_files_and_arrays_are_read_in_native_byte_order(tmp_path):
    from lightning_spectral.io import EmbeddingFile

    features = np.random.default_rng(0).normal(size=(30, 4))
    index = np.arange(30)[::-1] * 2
    for dtype in (">f4", ">f8", ">f2"):
        np.save(tmp_path / "ref.npy", features.astype(dtype))  # numpy keeps the byte order in the file
        np.save(tmp_path / "ref.index.npy", index.astype(">i8"))
        table = PrecomputedFeatures(tmp_path / "ref.npy")
        assert table.memory_mapped and table._data.dtype.byteorder == ">"  # converted per lookup, not up front
        expected = torch.from_numpy(features.astype(dtype).astype(dtype.replace(">", "=")))
        expected = expected if expected.dtype != torch.float16 else expected.float()
        torch.testing.assert_close(table[index[[0, 7, 29]]], expected[[0, 7, 29]], rtol=0, atol=0)
        torch.testing.assert_close(table[int(index[3])], expected[3], rtol=0, atol=0)
        chunks = [x for x, _ in EmbeddingFile(tmp_path / "ref.npy").chunks(batch_size=8)]  # the command line's reader
        assert torch.equal(torch.cat(chunks).to(expected.dtype), expected)
    in_memory = PrecomputedFeatures(features.astype(">f4"), index=index.astype(">i4"))  # arrays, not files
    torch.testing.assert_close(in_memory[index[[1, 2]]], torch.from_numpy(features[[1, 2]]).float(), rtol=0, atol=0)
    torch.testing.assert_close(in_memory[np.array([index[1]], dtype=">i8")], in_memory[[int(index[1])]])
    save_features(tmp_path / "saved.pt", features.astype(">f8"), index=index.astype(">i8"))
    torch.testing.assert_close(PrecomputedFeatures(tmp_path / "saved.pt")[index[[5]]], torch.from_numpy(features[[5]]))
    broken = features.astype(">f4")
    broken[4, 1] = np.inf
    np.save(tmp_path / "inf.npy", broken)
    (tmp_path / "inf.index.npy").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="NaN or Inf at rows \\[4\\]"):
        PrecomputedFeatures(tmp_path / "inf.npy")[[3, 4]]


def test_precomputed_features_index_sidecar_and_overrides(tmp_path):
    features = torch.arange(12.0).reshape(4, 3)
    save_features(tmp_path / "ref.npy", features, index=[3, 2, 1, 0])
    assert (tmp_path / "ref.index.npy").is_file()
    torch.testing.assert_close(PrecomputedFeatures(tmp_path / "ref.npy")[[0]], features[[3]])
    torch.testing.assert_close(PrecomputedFeatures(tmp_path / "ref.npy", index=[0, 1, 2, 3])[[0]], features[[0]])
    save_features(tmp_path / "ref.npy", features)  # rewritten without an index: the old index must go
    assert not (tmp_path / "ref.index.npy").exists()
    torch.testing.assert_close(PrecomputedFeatures(tmp_path / "ref.npy")[[0]], features[[0]])
    torch.save(features.half(), tmp_path / "half.pt")  # a bare tensor, stored in half precision
    assert PrecomputedFeatures(tmp_path / "half.pt")[[1]].dtype == torch.float32


def test_precomputed_features_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file at"):
        PrecomputedFeatures(tmp_path / "missing.npy")
    (tmp_path / "ref.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="supported: .npy, .pt, .safetensors"):
        PrecomputedFeatures(tmp_path / "ref.csv")
    np.save(tmp_path / "cube.npy", np.zeros((2, 3, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="2-D"):
        PrecomputedFeatures(tmp_path / "cube.npy")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="not a plain numeric .npy"):
        PrecomputedFeatures(tmp_path / "objects.npy")
    torch.save({"features": torch.tensor([[1.0, float("nan")]])}, tmp_path / "nan.pt")
    with pytest.raises(ValueError, match="NaN or Inf in 1 of 1 rows"):
        PrecomputedFeatures(tmp_path / "nan.pt")
    torch.save({"feats": torch.zeros(2, 2)}, tmp_path / "keys.pt")
    with pytest.raises(ValueError, match="'features' tensor"):
        PrecomputedFeatures(tmp_path / "keys.pt")
    torch.save({"features": torch.zeros(2, 2), "extra": Payload()}, tmp_path / "unsafe.pt")
    with pytest.raises(ValueError, match="refused to load"):
        PrecomputedFeatures(tmp_path / "unsafe.pt")
    assert UNPICKLED == []
    with pytest.raises(ValueError, match="floating-point"):
        PrecomputedFeatures(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="repeated"):
        PrecomputedFeatures(torch.zeros(3, 2), index=[0, 1, 1])
    with pytest.raises(ValueError, match="3 entries but the features have 2 rows"):
        PrecomputedFeatures(torch.zeros(2, 2), index=[0, 1, 2])
    with pytest.raises(ValueError, match=">= 0"):
        PrecomputedFeatures(torch.zeros(2, 2), index=[-1, 1])
    with pytest.raises(ValueError, match="integers"):
        PrecomputedFeatures(torch.zeros(2, 2))[torch.tensor([0.0])]
    with pytest.raises(KeyError, match=r"\[-1\]"):
        PrecomputedFeatures(torch.zeros(2, 2))[[-1]]
    with pytest.raises(ValueError, match="suffix '.h5'"):
        save_features(tmp_path / "ref.h5", torch.zeros(2, 2))
    with pytest.raises(ValueError, match="NaN or Inf"):
        save_features(tmp_path / "ref.pt", torch.tensor([[float("inf"), 0.0]]))


def test_reference_embedding_reads_a_features_file(tmp_path):
    from lightning_spectral.callbacks.embeddings import ReferenceEmbedding

    features = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    save_features(tmp_path / "ref.safetensors", features, index=torch.arange(9, -1, -1))
    reference = ReferenceEmbedding(str(tmp_path / "ref.safetensors"), index="index")
    out = reference({"index": torch.tensor([0, 9])}, torch.device("cpu"))
    torch.testing.assert_close(out, features[[9, 0]], rtol=0, atol=0)
