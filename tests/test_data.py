"""Image-caption datamodules: the offline digits, open_clip-style CSV files and image folders."""

import pickle
from collections import Counter

import lightning as L
import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits

from lightning_spectral.data import (
    OPENAI_DATASET_MEAN,
    OPENAI_DATASET_STD,
    CsvImageText,
    DigitsImageText,
    ImageFolderText,
    stratified_split,
)

DIGITS = load_digits()


def all_items(loader):
    batches = list(loader)
    return {key: torch.cat([b[key] for b in batches]) for key in ("index", "label")}


def test_digits_batches_shapes_and_types():
    data = DigitsImageText(image_size=24, batch_size=16, tokenizer="ViT-B-32", context_length=12)
    batch = next(iter(data.train_dataloader()))  # setup happens on first use
    assert batch["image"].shape == (16, 3, 24, 24) and batch["image"].dtype == torch.float32
    assert batch["text"].shape == (16, 12) and batch["text"].dtype == torch.long
    assert batch["index"].dtype == torch.long and batch["label"].dtype == torch.long
    assert batch["caption"] == [f"a photo of the digit {int(k)}" for k in batch["label"]]
    import open_clip

    tokenizer = open_clip.get_tokenizer("ViT-B-32", context_length=12)
    torch.testing.assert_close(batch["text"], tokenizer(batch["caption"]), rtol=0, atol=0)
    assert data.prompts == [f"a photo of the digit {k}" for k in range(10)]  # position = label
    assert data.class_names[3] == "3"


def test_digits_images_are_the_sklearn_digits():
    raw = DigitsImageText(image_size=8, mean=None, std=None)  # no resampling at 8x8: exact pixels / 16
    raw.setup()
    item = raw.val_set[5]
    expected = torch.from_numpy(DIGITS.images[item["index"]] / 16.0).float()
    assert item["label"] == DIGITS.target[item["index"]]
    for channel in item["image"]:
        torch.testing.assert_close(channel, expected, rtol=0, atol=1e-6)
    large = DigitsImageText(image_size=40, mean=None, std=None)
    large.setup()
    image = large.val_set[5]["image"]
    assert image.shape == (3, 40, 40) and 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    # bilinear upsampling keeps each 5x5 block's centre close to its source pixel
    torch.testing.assert_close(image[0, 2::5, 2::5], expected, rtol=0, atol=0.35)
    assert torch.corrcoef(torch.stack([image[0, 2::5, 2::5].flatten(), expected.flatten()]))[0, 1] > 0.9
    normalised = DigitsImageText(image_size=40)
    normalised.setup()
    mean, std = torch.tensor(OPENAI_DATASET_MEAN).view(3, 1, 1), torch.tensor(OPENAI_DATASET_STD).view(3, 1, 1)
    torch.testing.assert_close(normalised.val_set[5]["image"] * std + mean, image)


def test_digits_split_is_deterministic_stratified_and_holds_classes_out():
    data = DigitsImageText(image_size=8, batch_size=128, seed=3)
    again = DigitsImageText(image_size=8, batch_size=128, seed=3)
    other = DigitsImageText(image_size=8, batch_size=128, seed=4)
    for module in (data, again, other):
        module.setup("fit")
    assert data.train_set.indices == again.train_set.indices and data.val_set.indices == again.val_set.indices
    assert data.val_set.indices != other.val_set.indices
    train, val = set(data.train_set.indices), set(data.val_set.indices)
    ood = all_items(data.ood_dataloader())
    inside = {i for i, k in enumerate(DIGITS.target) if k not in (8, 9)}
    assert not train & val and train | val == inside
    assert sorted(ood["index"].tolist()) == [i for i, k in enumerate(DIGITS.target) if k in (8, 9)]
    assert set(ood["label"].tolist()) == {8, 9}
    assert (DIGITS.target[ood["index"].numpy()] == ood["label"].numpy()).all()
    val_counts = Counter(data.val_set.labels)
    total = Counter(int(k) for k in DIGITS.target)
    assert set(val_counts) == set(range(8))
    assert all(val_counts[k] == round(0.2 * total[k]) for k in range(8))
    # a real loader: every training sample once per epoch, reshuffled between epochs (Lightning calls
    # sampler.set_epoch), the same order for a seed and epoch, so a resumed run sees the same batches
    loader = data.train_dataloader()
    first = all_items(loader)["index"]
    loader.sampler.set_epoch(1)
    second = all_items(loader)["index"]
    assert sorted(first.tolist()) == sorted(train) and not torch.equal(first, second)
    torch.testing.assert_close(all_items(again.train_dataloader())["index"], first, rtol=0, atol=0)
    resumed = again.train_dataloader()
    resumed.sampler.set_epoch(1)
    torch.testing.assert_close(all_items(resumed)["index"], second, rtol=0, atol=0)
    assert sorted(all_items(data.train_dataloader_for_eval())["index"].tolist()) == sorted(train)


def test_digits_other_held_out_classes_and_loaders():
    data = DigitsImageText(image_size=8, held_out=(3,), val_fraction=0.0, batch_size=64, ood_in_val=True)
    with pytest.raises(ValueError, match="val split is empty"):
        data.val_dataloader()
    assert set(data.train_set.labels) == set(range(10)) - {3}
    assert set(data.ood_set.labels) == {3}
    data = DigitsImageText(image_size=8, held_out=(), ood_in_val=True)
    assert isinstance(data.train_dataloader(), torch.utils.data.DataLoader)
    with pytest.raises(ValueError, match="ood split is empty"):
        data.ood_dataloader()
    data = DigitsImageText(image_size=8, ood_in_val=True)
    val, ood = data.val_dataloader()
    assert set(all_items(val)["label"].tolist()) == set(range(8)) and set(all_items(ood)["label"].tolist()) == {8, 9}
    assert len(data.val_dataloader_for_eval().dataset) == len(val.dataset)


def test_digits_with_an_open_clip_transform_and_workers():
    from lightning_spectral.encoders import create_clip

    tiny = dict(
        embed_dim=16,
        vision_cfg=dict(image_size=32, layers=1, width=32, head_width=16, patch_size=16),
        text_cfg=dict(context_length=8, width=32, heads=2, layers=1),
    )
    model, preprocess_train, preprocess_val, tokenizer = create_clip("ViT-B-32", **tiny)
    pil = DigitsImageText(
        image_size=32, transform=preprocess_val, train_transform=preprocess_train, tokenizer=tokenizer
    )
    fast = DigitsImageText(image_size=32, tokenizer=tokenizer)
    pil.setup(), fast.setup()
    # the PIL route (uint8 rounding) and the tensor route agree to within one grey level
    assert (pil.val_set[0]["image"] - fast.val_set[0]["image"]).abs().max() <= 1.01 / 255 / min(OPENAI_DATASET_STD)
    pickle.dumps(pil.train_set)  # workers need picklable datasets
    workers = DigitsImageText(image_size=32, tokenizer=tokenizer, batch_size=100, num_workers=1)
    batch = next(iter(workers.val_dataloader()))
    assert batch["image"].shape == (100, 3, 32, 32) and batch["text"].shape == (100, 8)
    with torch.no_grad():
        assert model.encode_image(batch["image"]).shape == (100, 16)
        assert model.encode_text(batch["text"]).shape == (100, 16)


def test_digits_in_a_trainer_with_the_ood_loader():
    class Probe(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(3 * 8 * 8, 4)
            self.seen = Counter()

        def training_step(self, batch, batch_idx):
            return self.encoder(batch["image"].flatten(1)).pow(2).mean()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen[dataloader_idx] += int(batch["label"].numel())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = DigitsImageText(image_size=8, batch_size=256, ood_in_val=True)
    probe = Probe()
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(probe, datamodule=data)
    assert probe.seen[0] == len(data.val_set) and probe.seen[1] == len(data.ood_set)


def test_precomputed_features_line_up_with_the_index_of_batches(tmp_path):
    from lightning_spectral.callbacks.embeddings import ReferenceEmbedding
    from lightning_spectral.encoders import save_features

    save_features(tmp_path / "pixels.npy", DIGITS.data.astype(np.float32))  # features of all 1797 digits
    reference = ReferenceEmbedding(str(tmp_path / "pixels.npy"), index="index")
    data = DigitsImageText(image_size=8, mean=None, std=None, batch_size=32)
    for loader in (data.train_dataloader(), data.ood_dataloader()):
        batch = next(iter(loader))
        looked_up = reference(batch, torch.device("cpu")).reshape(-1, 8, 8) / 16.0
        torch.testing.assert_close(looked_up, batch["image"][:, 0], rtol=0, atol=1e-6)


def test_features_of_the_training_split_alone_serve_training_batches(tmp_path):
    from lightning_spectral.callbacks.embeddings import ReferenceEmbedding
    from lightning_spectral.encoders import PrecomputedFeatures, save_features

    data = DigitsImageText(image_size=8, mean=None, std=None, batch_size=64)
    batches = list(data.train_dataloader_for_eval())  # e.g. a frozen encoder run once over the training split
    features = torch.cat([b["image"][:, 0].flatten(1) for b in batches])
    save_features(tmp_path / "train.pt", features, index=torch.cat([b["index"] for b in batches]))
    table = PrecomputedFeatures(tmp_path / "train.pt")
    assert len(table) == len(data.train_set) < table.shape[0]  # sparse: held-out / val indices have no rows
    reference = ReferenceEmbedding(table, index="index")
    batch = next(iter(data.train_dataloader()))
    torch.testing.assert_close(reference(batch, torch.device("cpu")), batch["image"][:, 0].flatten(1))
    with pytest.raises(KeyError, match="have no features"):
        reference(next(iter(data.val_dataloader())), torch.device("cpu"))


def test_digits_argument_errors():
    with pytest.raises(ValueError, match="held_out"):
        DigitsImageText(held_out=(10,))
    with pytest.raises(ValueError, match="held_out"):
        DigitsImageText(held_out=(1, 1))
    with pytest.raises(ValueError, match="every digit"):
        DigitsImageText(held_out=tuple(range(10)))
    with pytest.raises(ValueError, match="val_fraction"):
        DigitsImageText(val_fraction=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        DigitsImageText(batch_size=0)
    with pytest.raises(ValueError, match="template"):
        DigitsImageText(template="a photo of a digit")
    with pytest.raises(ValueError, match="both `mean` and `std`"):
        DigitsImageText(std=None)
    with pytest.raises(ValueError, match="tokenizer"):
        DigitsImageText(tokenizer=3)
    with pytest.raises(ValueError, match="context_length"):
        DigitsImageText(tokenizer=lambda texts: torch.zeros(len(texts), 4, dtype=torch.long), context_length=4)
    with pytest.raises(ValueError, match=r"`val_fraction` must be in \[0, 1\), got nan"):
        DigitsImageText(val_fraction=float("nan"))
    with pytest.raises(ValueError, match="`caption_noise` must be a number"):
        DigitsImageText(caption_noise=True)
    with pytest.raises(ValueError, match="`num_workers` must be an integer >= 0"):
        DigitsImageText(num_workers=-1)
    with pytest.raises(ValueError, match="`seed` must be an integer"):
        DigitsImageText(seed=1.5)
    assert DigitsImageText(seed=np.int64(3)).seed == 3 and type(DigitsImageText(seed=np.int64(3)).seed) is int
    with pytest.raises(TypeError, match="`ood_in_val` must be True or False"):
        DigitsImageText(ood_in_val="false")  # a truthy string: read as True before
    with pytest.raises(ValueError, match="`mean` must be 3 finite numbers"):
        DigitsImageText(mean=(0.5, 0.5))
    with pytest.raises(ValueError, match="`std` must be > 0"):
        DigitsImageText(std=(0.2, 0.0, 0.2))
    bad = DigitsImageText(image_size=8, tokenizer=lambda texts: torch.zeros(4, dtype=torch.long))
    bad.setup()
    with pytest.raises(ValueError, match=r"\(n, context_length\)"):
        bad.train_set[0]


def test_stratified_split_is_per_class_and_seeded():
    labels = [0] * 10 + [1] * 5 + [2] * 1
    first, second = stratified_split(labels, 0.4, seed=1)
    assert sorted(first + second) == list(range(16))
    assert Counter(labels[i] for i in second) == Counter({0: 4, 1: 2})
    assert stratified_split(labels, 0.4, seed=1) == (first, second)
    assert stratified_split(labels, 0.4, seed=2) != (first, second)


# ---------------------------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------------------------


def write_image(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((20, 30, 3), value, dtype=np.uint8)).save(path)


@pytest.mark.parametrize("sep", ["\t", ","])
def test_csv_in_open_clip_format(tmp_path, sep):
    rows = [(f"images/{i}.png", f"caption number {i}") for i in range(10)]
    for i, (name, _) in enumerate(rows):
        write_image(tmp_path / name, 20 * i)
    lines = [f"filepath{sep}title"] + [f"{name}{sep}{caption}" for name, caption in rows]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    data = CsvImageText(
        tmp_path / "train.csv", sep=sep, val_fraction=0.3, image_size=16, mean=None, std=None, batch_size=4
    )
    data.setup("fit")
    assert sorted(data.train_set.indices + data.val_set.indices) == list(range(10)) and len(data.val_set) == 3
    item = data.val_set[1]
    index = item["index"]
    assert item["caption"] == f"caption number {index}" and item["label"] == -1
    assert item["image"].shape == (3, 16, 16)
    torch.testing.assert_close(item["image"], torch.full((3, 16, 16), 20 * index / 255), rtol=0, atol=1e-6)
    batch = next(iter(data.train_dataloader()))
    assert batch["image"].shape == (4, 3, 16, 16) and "text" not in batch
    with pytest.raises(ValueError, match="ood split is empty"):
        data.ood_dataloader()
    if sep == ",":
        with pytest.raises(ValueError, match="is `sep` right"):
            CsvImageText(tmp_path / "train.csv").setup()  # read with the default tab


def test_csv_with_separate_files_labels_and_tokens(tmp_path):
    def write_csv(name, count, offset):
        lines = ["path\tcaption\tclass"]
        for i in range(count):
            image = tmp_path / "img" / f"{name}{i}.png"
            write_image(image, offset + i)
            lines.append(f"{image}\ta picture {i}\t{i % 2}")
        (tmp_path / f"{name}.csv").write_text("\n".join(lines) + "\n")
        return tmp_path / f"{name}.csv"

    train, val, ood = write_csv("train", 6, 0), write_csv("val", 3, 50), write_csv("ood", 2, 100)
    tokenizer = lambda texts: torch.arange(5).repeat(len(texts), 1)  # noqa: E731
    data = CsvImageText(
        train,
        img_key="path",
        caption_key="caption",
        label_key="class",
        val_csv=val,
        ood_csv=ood,
        tokenizer=tokenizer,
        image_size=8,
        class_names=["even", "odd"],
        ood_in_val=True,
    )
    val_loader, ood_loader = data.val_dataloader()
    assert len(data.train_set) == 6 and len(val_loader.dataset) == 3 and len(ood_loader.dataset) == 2
    batch = next(iter(val_loader))
    assert batch["label"].tolist() == [0, 1, 0] and batch["text"].shape == (3, 5)
    assert data.prompts == ["a photo of a even", "a photo of a odd"]
    with pytest.raises(
        ValueError, match=r"no column\(s\) \['filepath', 'title'\]; its columns are \['path', 'caption'"
    ):
        CsvImageText(train).setup()
    (tmp_path / "missing.csv").write_text("filepath\ttitle\nnowhere.png\tx\n")
    with pytest.raises(FileNotFoundError, match="1 of the 1 images"):
        CsvImageText(tmp_path / "missing.csv").setup()
    with pytest.raises(FileNotFoundError, match="csv_path"):
        CsvImageText(tmp_path / "absent.csv")


def test_image_folder_with_class_captions_and_held_out_classes(tmp_path):
    for name, count, value in (("cat", 5, 10), ("golden_retriever", 5, 120), ("zebra", 3, 240)):
        for i in range(count):
            write_image(tmp_path / name / f"{i}.jpg" if i % 2 else tmp_path / name / "sub" / f"{i}.png", value)
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    data = ImageFolderText(tmp_path, held_out=("zebra",), val_fraction=0.2, image_size=12, mean=None, std=None)
    data.setup()
    assert data.class_names == ["cat", "golden retriever", "zebra"]
    assert data.prompts[1] == "a photo of a golden retriever"
    assert len(data.train_set) + len(data.val_set) == 10 and len(data.ood_set) == 3
    assert set(data.ood_set.labels) == {2} and set(data.train_set.labels) == {0, 1}
    item = data.train_set[len(data.train_set) - 1]
    assert item["caption"] == "a photo of a golden retriever" and item["label"] == 1
    torch.testing.assert_close(item["image"].mean(), torch.tensor(120 / 255), rtol=0, atol=0.02)  # jpeg
    with pytest.raises(ValueError, match="not class folders"):
        ImageFolderText(tmp_path, held_out=("dog",))
    with pytest.raises(FileNotFoundError, match="no folder"):
        ImageFolderText(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="no class subfolders"):
        ImageFolderText(tmp_path / "cat" / "sub")


def test_image_folder_indices_follow_torchvision_and_hidden_folders_are_no_classes(tmp_path):
    from torchvision.datasets import ImageFolder

    for name in ("b", "a"):
        for file in ("z.png", "sub/y.png", "m.jpg", "sub/deeper/x.png", "sub2/w.png"):
            write_image(tmp_path / name / file, 50)
        (tmp_path / name / "notes.txt").write_text("not an image")
    data = ImageFolderText(tmp_path, val_fraction=0.0, image_size=8)
    data.setup()
    # the same samples in the same order as torchvision's ImageFolder: index i is ImageFolder(root).samples[i]
    assert list(zip(data._sources, data.train_set.labels)) == ImageFolder(str(tmp_path)).samples
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write_image(tmp_path / ".ipynb_checkpoints" / "stale.png", 0)
    (tmp_path / "empty").mkdir()  # a class without images yet: a prompt, no samples
    data = ImageFolderText(tmp_path, val_fraction=0.0, image_size=8)
    data.setup()
    assert data.class_names == ["a", "b", "empty"] and len(data.train_set) == 10
    assert not any(".ipynb_checkpoints" in path for path in data._sources)


def test_the_default_transform_is_resize_crop_and_normalise(tmp_path):
    from torchvision import transforms

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8)).save(tmp_path / "x.png")
    (tmp_path / "train.csv").write_text("filepath\ttitle\n" + f"{tmp_path / 'x.png'}\ta\n" * 2)
    data = CsvImageText(tmp_path / "train.csv", val_fraction=0.0, image_size=16)
    data.setup()
    expected = transforms.Compose(
        [
            transforms.Resize(16, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(16),
            transforms.ToTensor(),
            transforms.Normalize(OPENAI_DATASET_MEAN, OPENAI_DATASET_STD),
        ]
    )(Image.open(tmp_path / "x.png").convert("RGB"))
    torch.testing.assert_close(data.train_set[0]["image"], expected, rtol=0, atol=0)
    mean, std = torch.tensor(OPENAI_DATASET_MEAN).view(3, 1, 1), torch.tensor(OPENAI_DATASET_STD).view(3, 1, 1)
    torch.testing.assert_close(data.image_of(0), expected * std + mean, rtol=0, atol=1e-6)  # galleries: [0, 1]


def test_caption_noise_relabels_a_seeded_fraction_of_training_captions_only():
    clean = DigitsImageText(image_size=8, seed=3)
    noisy = DigitsImageText(image_size=8, seed=3, caption_noise=0.5)
    clean.setup(), noisy.setup()
    changed = [a != b for a, b in zip(clean.train_set.captions, noisy.train_set.captions)]
    # half the captions are redrawn, 1 in 8 redraws lands on the true digit: ~7/16 change
    assert 0.38 < sum(changed) / len(changed) < 0.50
    assert noisy.val_set.captions == clean.val_set.captions and noisy.train_set.labels == clean.train_set.labels
    assert {c[-1] for c in noisy.train_set.captions} <= {str(k) for k in range(8)}  # held-out digits never named
    again = DigitsImageText(image_size=8, seed=3, caption_noise=0.5)
    again.setup()
    assert again.train_set.captions == noisy.train_set.captions
    with pytest.raises(ValueError, match="caption_noise"):
        DigitsImageText(caption_noise=1.5)


def test_load_image_scales_sixteen_bit_greys(tmp_path):
    """`LoadImage` reads as the command line does: a 16-bit grey PNG keeps its level (not clipped to white)."""
    from torchvision.transforms.functional import pil_to_tensor

    from lightning_spectral.data import LoadImage

    Image.fromarray(np.full((4, 4), 20000, np.uint16)).save(tmp_path / "a.png")
    pixels = LoadImage(pil_to_tensor)(tmp_path / "a.png")
    assert pixels.shape == (3, 4, 4) and pixels.unique().tolist() == [round(20000 / 65535 * 255)]
