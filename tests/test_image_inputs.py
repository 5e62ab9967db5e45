"""Image inputs read by the one image reader (io.images) and the one list reader (io.text_lists): float TIFFs scaled
by a fixed top, UTF-16 lists decoded by their byte-order mark, undecodable lists and decompression bombs refused by
name."""

import json

import numpy as np
import pytest
from PIL import Image

from lightning_spectral.cli import main
from lightning_spectral.cli.images import list_images
from lightning_spectral.cli.pictures import image_paths
from lightning_spectral.data import LoadImage
from lightning_spectral.io import list_encoding, open_rgb, read_list


def float_tiffs(folder, n=8, top=1.0):
    """``n`` distinct 16 x 16 float32 greys in [0, top] as mode "F" TIFFs written by PIL; their values."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    values = [(rng.random((16, 16)) * top).astype(np.float32) for _ in range(n)]
    for i, value in enumerate(values):
        Image.fromarray(value, mode="F").save(folder / f"{i}.tif")
    return values


@pytest.mark.parametrize("top", [1.0, 255.0, 65535.0])
def test_a_float_tiff_is_scaled_by_its_fixed_top(tmp_path, top):
    values = float_tiffs(tmp_path, n=1, top=top)[0]
    with Image.open(tmp_path / "0.tif") as image:
        assert image.mode == "F"
    rgb = np.asarray(open_rgb(tmp_path / "0.tif"))
    assert rgb.shape == (16, 16, 3) and (rgb[..., 0] == rgb[..., 2]).all()
    expected = np.clip(np.round(values.astype(np.float64) / top * 255), 0, 255)
    assert np.array_equal(rgb[..., 0], expected.astype(np.uint8))


def test_float_tiffs_in_0_1_are_distinct_images_for_the_cli(tmp_path, capsys):
    float_tiffs(tmp_path / "tiffs")
    code = main(["evaluate", str(tmp_path / "tiffs"), "--sigma", "4", "--n-frequencies", "64", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["vendi"]["1"] > 2  # 8 random images; read as black they gave 1.001


def test_data_load_image_reads_a_float_tiff(tmp_path):
    values = float_tiffs(tmp_path, n=1)[0]
    picture = LoadImage(lambda image: np.asarray(image))(tmp_path / "0.tif")
    assert abs(picture[..., 0].mean() / 255 - values.mean()) < 0.01


@pytest.mark.parametrize("value", [-0.5, 70000.0, float("nan")])
def test_a_float_image_no_fixed_top_fits_is_refused_by_name(tmp_path, value):
    Image.fromarray(np.full((4, 4), value, np.float32), mode="F").save(tmp_path / "odd.tif")
    with pytest.raises(ValueError, match=r"odd\.tif.*float image.*(\[0, 1\]|finite)"):
        open_rgb(tmp_path / "odd.tif")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-8-sig", "utf-32"])
def test_lists_with_a_byte_order_mark_are_decoded(tmp_path, encoding):
    float_tiffs(tmp_path, n=2)
    (tmp_path / "1.tif").rename(tmp_path / "\u00e9t\u00e9.tif")
    listing = tmp_path / "list.txt"
    text = "0.tif\r\n\u00e9t\u00e9.tif\r\n"
    bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}.get(encoding, b"")
    listing.write_bytes(bom + text.encode(encoding))
    assert list_encoding(listing) in ("utf-16", "utf-8-sig", "utf-32")
    assert read_list(listing, "FILE").splitlines() == ["0.tif", "\u00e9t\u00e9.tif"]
    assert list_images(str(listing), "FILE") == [tmp_path / "0.tif", tmp_path / "\u00e9t\u00e9.tif"]
    assert {i: p.name for i, p in image_paths(listing, [0, 1]).items()} == {0: "0.tif", 1: "\u00e9t\u00e9.tif"}


@pytest.mark.parametrize("raw", ["caf\u00e9.tif\n".encode("latin-1"), "a.tif\n".encode("utf-16-le")])
def test_a_list_that_is_not_utf8_is_refused_naming_it_and_the_encoding(tmp_path, raw):
    listing = tmp_path / "list.txt"
    listing.write_bytes(raw)
    with pytest.raises(ValueError, match=r"`FILE`: the list .*list\.txt' is not UTF-8 text \(line 1.*save it as UTF-8"):
        list_images(str(listing), "FILE")
    with pytest.raises(ValueError, match=r"`--images`: the list .*list\.txt' is not UTF-8"):
        image_paths(listing, [0])


def test_a_decompression_bomb_is_refused_by_name_before_decoding(tmp_path, monkeypatch):
    Image.new("L", (100, 60)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    pattern = r"big\.png' is 6,000 pixels, over PIL's limit of 2,000 pixels.*MAX_IMAGE_PIXELS = 6000"
    with pytest.raises(ValueError, match=pattern):
        open_rgb(tmp_path / "big.png")
    with pytest.raises(ValueError, match="`FILE`: the image .*" + pattern):
        list_images(str(tmp_path), "FILE")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 6000)  # the fix the message names
    assert open_rgb(tmp_path / "big.png").size == (100, 60)
