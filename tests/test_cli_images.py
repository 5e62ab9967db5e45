"""Images where the command line takes embeddings: folders and .txt lists embedded by --encoder, the same numbers
as their embeddings, kept with --save-features, sharded under torchrun, and every argument error before any work."""

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from lightning_spectral.cli import main
from lightning_spectral.cli.images import build_encoder, list_images, read_images
from lightning_spectral.cli.runtime import UsageError
from lightning_spectral.data import load_digit_images
from tests.test_cli import free_port, subprocess_env


def cli(capsys, *argv):
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def digits_folder(folder, classes, start, n, nested=False):
    """``n`` digits of ``classes`` from index ``start`` on, as 24 x 24 PNGs (in class sub-folders if ``nested``)."""
    images, labels = load_digit_images()
    chosen = [i for i in range(start, len(labels)) if int(labels[i]) in classes][:n]
    for i in chosen:
        where = folder / f"c{int(labels[i])}" if nested else folder
        where.mkdir(parents=True, exist_ok=True)
        pixels = (images[i, 0].numpy() * 255).astype(np.uint8)
        Image.fromarray(pixels).resize((24, 24), Image.NEAREST).save(where / f"{i:04d}.png")
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    digits_folder(root / "real", range(10), 0, 120, nested=True)
    digits_folder(root / "gen", range(7), 900, 100)
    return root


EVALUATE = ["--sigma", "4", "--n-frequencies", "64", "--top-k", "2", "--per-mode", "3", "--no-progress"]


def test_a_folder_and_its_saved_features_give_the_same_numbers(folders, tmp_path, capsys):
    saved = tmp_path / "features"
    code, out, err = cli(capsys, "evaluate", folders / "gen", "--reference", folders / "real", *EVALUATE,
                         "--mode-samples", "--save-features", saved)
    assert code == 0, err
    assert out["images"]["file"]["images"] == 100 and out["images"]["reference"]["images"] == 120  # recursive
    assert out["arguments"]["file"] == str(folders / "gen")  # the JSON says what was typed
    listing = (saved / "file.images.txt").read_text().splitlines()
    assert listing == [str(path.resolve()) for path in sorted((folders / "gen").glob("*.png"))]  # line i = row i
    code, again, err = cli(capsys, "evaluate", saved / "file.npy", "--reference", saved / "reference.npy", *EVALUATE,
                           "--mode-samples")
    assert code == 0, err
    for section, key in (("vendi", "1"), ("finc", "novelty"), ("mmd", "p_value")):
        assert out[section][key] == again[section][key], (section, key)
    assert [m["ids"] for m in out["modes"]["top_samples"]] == [m["ids"] for m in again["modes"]["top_samples"]]


def test_a_txt_list_is_a_folder_in_the_listed_order(folders, tmp_path, capsys):
    files = sorted((folders / "gen").glob("*.png"))[::-1]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{path}\n" for path in files))
    assert list_images(str(listing), "FILE") == files  # line i = sample i
    code, out, err = cli(capsys, "evaluate", listing, *EVALUATE)
    assert code == 0, err
    code, by_folder, err = cli(capsys, "evaluate", folders / "gen", *EVALUATE)
    assert out["vendi"]["1"] == pytest.approx(by_folder["vendi"]["1"], rel=1e-6)  # order: float32 rounding only


def test_galleries_show_the_images_themselves(folders, tmp_path, capsys):
    plots = tmp_path / "plots"
    code, out, err = cli(capsys, "ood", folders / "real", folders / "gen", "--n-frequencies", "64", "--top-k", "4",
                         "--plot-dir", plots, "--no-progress")
    assert code == 0, err
    assert set(out["pictures"]) == {"spectrum", "most_ood"}
    with Image.open(out["pictures"]["most_ood"]) as gallery:
        assert gallery.size[1] >= 64 + 2 * 14  # 24 px digits enlarged to 72, id and score under each
    code, out, err = cli(capsys, "evaluate", folders / "gen", "--reference", folders / "real", *EVALUATE,
                         "--missing-modes", "--plot-dir", plots)
    assert code == 0, err
    assert "modes" in out["pictures"]


def test_pixels_encoder_reads_images_at_its_size():
    encoder, size = build_encoder("pixels:8", None)
    assert size == 64 and encoder.pool == 8
    with pytest.raises(UsageError, match="pixels encoder has no weights"):
        build_encoder("pixels", "w.pt")
    with pytest.raises(UsageError, match="`--encoder` must be"):
        build_encoder("resnet", None)


def test_images_are_resized_and_centre_cropped(tmp_path):
    Image.fromarray(np.zeros((30, 60, 3), np.uint8)).save(tmp_path / "wide.png")
    assert tuple(read_images([tmp_path / "wide.png"], 16).shape) == (1, 3, 16, 16)


@pytest.fixture
def broken(folders, tmp_path):
    """Folders with one unreadable image, an empty folder, a list with a blank line, a short --images list."""
    bad = tmp_path / "bad"
    digits_folder(bad, range(10), 0, 5)
    (bad / "broken.png").write_bytes(b"not a png at all")
    (tmp_path / "empty").mkdir()
    blank = tmp_path / "blank.txt"
    blank.write_text(f"{next((folders / 'gen').glob('*.png'))}\n\n")
    short = tmp_path / "short.txt"
    short.write_text("a.png\n")
    return tmp_path


@pytest.mark.parametrize(
    "argv, message",
    [
        (["evaluate", "{tmp}/missing_folder", "--sigma", "1"], r"`FILE`: no folder at"),
        (["evaluate", "{tmp}/empty", "--sigma", "1"], r"`FILE`: the folder .* holds no image"),
        (["evaluate", "{gen}", "--reference", "{tmp}/bad", "--sigma", "1"],
         r"`--reference`: cannot read the image .*broken.png"),
        (["evaluate", "{tmp}/blank.txt", "--sigma", "1"], r"`FILE`: line 2 of .* is blank"),
        (["evaluate", "{gen}", "--sigma", "1", "--plot-dir", "{tmp}/p", "--images", "{tmp}/short.txt"],
         r"`--images` .* has 1 lines but `FILE` has 100 samples"),
        (["ood", "{gen}", "{gen}", "--encoder", "clip:"], r"`--encoder` must be"),
        (["evaluate", "{gen}", "--sigma", "1", "--weights", "{tmp}/w.pt"], r"no weights"),
        (["evaluate", "{tmp}/x.npy", "--sigma", "1", "--save-features", "{tmp}/f"], r"`--save-features` applies to"),
        (["evaluate", "{tmp}/x.npy", "--sigma", "1", "--encoder", "pixels:8"], r"`--encoder` applies to"),
    ],
    ids=["missing", "empty", "unreadable", "blank-line", "short-images", "encoder", "weights", "save-features",
         "encoder-without-images"],
)
def test_argument_errors_come_before_any_image_is_embedded(folders, broken, capsys, monkeypatch, argv, message):
    import re

    import lightning_spectral.cli.images as images

    def never(*args, **kwargs):
        raise AssertionError("an image was decoded before the arguments were checked")

    monkeypatch.setattr(images, "read_images", never)
    np.save(broken / "x.npy", np.zeros((10, 4), np.float32))
    argv = [a.format(tmp=broken, gen=folders / "gen") for a in argv]
    code, _, err = cli(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err


def test_a_short_images_list_is_refused_before_the_computation(tmp_path, capsys, monkeypatch):
    """An embedding FILE with an --images list of fewer lines: refused before any metric sees a row."""
    from lightning_spectral.metrics import FKEAVendi

    def never(*args, **kwargs):
        raise AssertionError("the metric was fed before --images was checked")

    monkeypatch.setattr(FKEAVendi, "update", never)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32))
    (tmp_path / "list.txt").write_text("a.png\n" * 49)
    code, _, err = cli(capsys, "evaluate", tmp_path / "x.npy", "--sigma", "1", "--plot-dir", tmp_path / "p",
                       "--images", tmp_path / "list.txt")
    assert code == 2 and "has 49 lines but `FILE` has 50 samples" in err, err


def test_torchrun_two_processes_embed_the_same_images_as_one(folders, capsys):
    argv = ["evaluate", str(folders / "gen"), "--reference", str(folders / "real"), *EVALUATE, "--mode-samples",
            "--image-batch-size", "16"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port()), "-m", "lightning_spectral.cli"]
    run = subprocess.run(launcher + argv, capture_output=True, text=True, env=subprocess_env(), timeout=240)
    assert run.returncode == 0, run.stderr
    ddp = json.loads(run.stdout)
    code, single, err = cli(capsys, *argv)
    assert code == 0, err
    assert ddp["world_size"] == 2 and ddp["images"]["file"]["images"] == 100
    for section, key in (("vendi", "1"), ("finc", "novelty"), ("mmd", "p_value")):
        assert ddp[section][key] == pytest.approx(single[section][key], rel=1e-6), (section, key)
    assert [m["ids"] for m in ddp["modes"]["top_samples"]] == [m["ids"] for m in single["modes"]["top_samples"]]


def test_compare_embeds_one_folder_with_two_encoders(folders, tmp_path, capsys):
    argv = ["compare", folders / "gen", folders / "gen", "--kernel", "cosine", "--top-k", "2", "--per-cluster", "3",
            "--no-progress"]
    code, out, err = cli(capsys, *argv, "--encoder", "pixels:4", "--encoder-b", "pixels:12",
                         "--save-features", tmp_path / "f", "--plot-dir", tmp_path / "plots")
    assert code == 0, err
    assert out["images"]["encoder"] == "pixels:4" and out["images"]["encoder_b"] == "pixels:12"
    assert set(out["pictures"]) == {"spectrum", "clusters_a", "clusters_b"}  # galleries of the images themselves
    code, again, err = cli(capsys, "compare", tmp_path / "f" / "a.npy", tmp_path / "f" / "b.npy", *argv[3:])
    assert code == 0, err
    assert again["spec_diff"] == pytest.approx(out["spec_diff"], rel=1e-9) and out["spec_diff"] > 0
    for extra, message in (([], "pass `--encoder-b`"), (["--encoder-b", "pixels"], "equals `--encoder`")):
        code, _, err = cli(capsys, *argv, *extra)
        assert code == 2 and message in err, err
    code, _, err = cli(capsys, "compare", folders / "gen", folders / "real", "--encoder-b", "pixels:8")
    assert code == 2 and "list different images (100 and 120)" in err, err


def test_sixteen_bit_greys_hidden_files_and_a_bom_list(tmp_path):
    """16-bit PNGs keep their grey levels (PIL's RGB conversion clips them at 255: all white), macOS's ._ files are
    not images, and a list saved with a byte-order mark reads its first path."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.fromarray(np.full((8, 8), 20000, np.uint16)).save(folder / "a.png")
    Image.fromarray(np.full((8, 8), 60000, np.uint16)).save(folder / "b.png")
    (folder / "._a.png").write_bytes(b"\x00\x05\x16\x07 resource fork")
    files = list_images(str(folder), "FILE")
    assert [f.name for f in files] == ["a.png", "b.png"]
    values = read_images(files, 8)[:, :, 0, 0]
    assert values[:, 0].tolist() == pytest.approx([20000 / 65535, 60000 / 65535], abs=1 / 255)
    listed = tmp_path / "list.txt"
    listed.write_text("imgs/a.png\nimgs/b.png\n", encoding="utf-8-sig")
    assert [f.name for f in list_images(str(listed), "FILE")] == ["a.png", "b.png"]


def test_sixteen_bit_greys_reach_the_plot_dir_thumbnails(tmp_path, capsys):
    """The ``--plot-dir`` galleries read their images as the encoders do: a 16-bit grey PNG is shown grey (PIL's
    RGB conversion alone clips it at 255: a white thumbnail)."""
    for i in range(4):
        Image.fromarray(np.full((8, 8), 20000, np.uint16)).save(tmp_path / f"{i}.png")
    (tmp_path / "list.txt").write_text("".join(f"{i}.png\n" for i in range(4)))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32))
    code, out, err = cli(capsys, "evaluate", tmp_path / "x.npy", "--sigma", "1", "--n-frequencies", "16",
                         "--top-k", "1", "--per-mode", "2", "--images", tmp_path / "list.txt",
                         "--plot-dir", tmp_path / "plots", "--no-progress")
    assert code == 0, err
    with Image.open(out["pictures"]["modes"]) as gallery:
        pixels = np.asarray(gallery.convert("RGB")).reshape(-1, 3)
    grey = round(20000 / 65535 * 255)
    assert (np.abs(pixels.astype(int) - grey).max(axis=1) <= 1).sum() >= 2 * 8 * 8  # two thumbnails of that grey
