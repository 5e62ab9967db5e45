"""Pictures reach every logger Lightning ships that can hold one, for real: a short Trainer.fit with
EmbeddingMetrics(images=...) under TensorBoard, CSV, W&B (offline) and MLflow (a local SQLite store); a logger that
cannot hold pictures is warned once, never skipped silently."""

import glob
import os
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_spectral.callbacks import EmbeddingMetrics
from lightning_spectral.metrics import FKEAVendi
from lightning_spectral.pictures import as_array, log_picture, log_text, plot_spectrum, takes_pictures
from tests.conftest import DigitsClassifier, digits

x, y = digits()
ids = torch.arange(len(x))
TRAIN = TensorDataset(x[:300], y[:300], ids[:300])
VAL = TensorDataset(x[300:500], y[300:500], ids[300:500])


def digit_image(i):
    return x[i].view(8, 8)


def fit(tmp_path, logger):
    """Two epochs with a Vendi gallery; returns the trainer."""
    callback = EmbeddingMetrics(
        {"vendi": FKEAVendi(sigma=2.0, n_frequencies=64)}, embedding="encoder", index=2, images=digit_image,
        gallery_modes=2, gallery_per_mode=3,
    )
    trainer = L.Trainer(
        callbacks=[callback], logger=logger, max_epochs=2, accelerator="cpu", devices=1, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
    )
    trainer.fit(DigitsClassifier(), DataLoader(TRAIN, batch_size=100), DataLoader(VAL, batch_size=100))
    return trainer


def test_tensorboard_gets_every_epochs_gallery(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = fit(tmp_path, TensorBoardLogger(tmp_path))
    events = EventAccumulator(trainer.logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert len(events.Images("val/vendi/modes")) == 2  # one per validation epoch


def test_csv_writes_pngs_beside_metrics_csv(tmp_path):
    from PIL import Image

    trainer = fit(tmp_path, CSVLogger(tmp_path))
    log_dir = trainer.logger.log_dir
    assert os.path.isfile(os.path.join(log_dir, "metrics.csv"))
    pngs = sorted(glob.glob(os.path.join(log_dir, "val_vendi_modes-step*.png")))
    assert len(pngs) == 2, os.listdir(log_dir)
    assert [os.path.basename(p) for p in pngs] == ["val_vendi_modes-step3.png", "val_vendi_modes-step6.png"]
    with Image.open(pngs[0]) as image:
        assert image.size[1] >= 2 * 64  # two rows of tiles of 64 px or more
    assert not glob.glob(os.path.join(log_dir, "*.tmp"))  # written, then renamed


def test_wandb_offline_run_holds_the_gallery(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="pictures")
    fit(tmp_path, logger)
    logger.experiment.finish()
    media = tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "images" / "val" / "vendi"
    images = glob.glob(str(media / "*.png"))
    assert len(images) == 2, glob.glob(str(tmp_path / "wandb" / "**" / "*.png"), recursive=True)


def test_mlflow_sqlite_store_holds_the_gallery(tmp_path):
    pytest.importorskip("mlflow")
    from lightning.pytorch.loggers import MLFlowLogger
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    logger = MLFlowLogger(experiment_name="pictures", tracking_uri=uri, artifact_location=str(tmp_path / "artifacts"))
    fit(tmp_path, logger)
    client = MlflowClient(uri)
    names = [item.path for item in client.list_artifacts(logger.run_id, "images")]
    steps = {name.split("/")[-1].split("%")[0] for name in names}
    assert any("val" in name and "vendi" in name for name in names), names
    pngs = glob.glob(str(tmp_path / "artifacts" / "**" / "*.png"), recursive=True)
    assert len(pngs) >= 2, names  # one image per validation epoch (with compressed thumbnails beside)
    assert steps


class NoPictures(Logger):
    """A logger of numbers only."""

    name, version = "numbers", 0

    def log_metrics(self, metrics, step=None):
        pass

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def test_a_logger_without_pictures_is_warned_once_and_the_others_still_get_them(tmp_path):
    csv = CSVLogger(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(tmp_path, [NoPictures(), csv])
    said = [str(w.message) for w in caught if "cannot hold pictures" in str(w.message)]
    assert len(said) == 1 and "NoPictures" in said[0] and "CSVLogger" in said[0]  # names what to do
    assert len(glob.glob(os.path.join(csv.log_dir, "*.png"))) == 2


def test_log_picture_draws_figures_and_reports_who_took_them(tmp_path):
    figure = plot_spectrum(torch.tensor([0.5, 0.3, 0.2]))
    array = as_array(figure)
    assert array.dtype.name == "uint8" and array.shape[2] == 3 and array.shape[0] > 100
    tb, csv = TensorBoardLogger(tmp_path / "tb"), CSVLogger(tmp_path / "csv")
    assert log_picture(tb, "spectrum", figure, step=1) == ["tensorboard"]
    assert log_picture(csv, "a/spectrum", figure, step=1) == ["csv"]
    assert os.path.isfile(os.path.join(csv.log_dir, "a_spectrum-step1.png"))
    assert takes_pictures(tb) and not takes_pictures(NoPictures())
    with pytest.warns(UserWarning, match="cannot hold pictures"):
        assert log_picture(NoPictures(), "tag", torch.zeros(3, 2, 2)) == []


def test_uint8_and_two_dimensional_images_read_the_same_in_every_logger(tmp_path):
    """A uint8 image (TensorBoard's convention: 0-255) is not clipped to white, and an (H, W) image goes to
    TensorBoard as to the others."""
    grey = torch.full((3, 4, 4), 128, dtype=torch.uint8)
    assert as_array(grey)[0, 0].tolist() == [128, 128, 128]
    assert (as_array(grey) == as_array(grey.float() / 255)).all()
    tensorboard = TensorBoardLogger(tmp_path / "tb")
    assert log_picture(tensorboard, "flat", torch.rand(8, 8), step=1) == ["tensorboard"]
    assert log_picture(tensorboard, "grey", grey, step=1) == ["tensorboard"]


def test_csv_pictures_without_a_step_never_overwrite_each_other(tmp_path):
    csv = CSVLogger(tmp_path)
    first, second = torch.zeros(3, 4, 4), torch.ones(3, 4, 4)
    log_picture(csv, "val/modes", first)
    log_picture(csv, "val/modes", second)
    assert sorted(os.listdir(csv.log_dir)) == ["val_modes-0.png", "val_modes-1.png"]


def saved_png(csv, tag, picture, step=1):
    """The pixels of the PNG the CSV logger wrote for ``picture``."""
    import numpy as np
    from PIL import Image

    assert log_picture(csv, tag, picture, step=step) == ["csv"]
    with Image.open(os.path.join(csv.log_dir, f"{tag}-step{step}.png")) as image:
        return np.asarray(image.convert("RGB"))


def test_every_kind_of_image_users_pass_is_logged_with_its_values(tmp_path):
    """Tensors, NumPy arrays (H, W, C) / (H, W), PIL images and figures; bools are black and white."""
    import matplotlib.figure
    import numpy as np
    from PIL import Image

    csv = CSVLogger(tmp_path)
    grey = np.array([[0, 64], [128, 255]], dtype=np.uint8)
    colour = np.zeros((2, 5, 3), dtype=np.uint8)
    colour[..., 0], colour[..., 2] = 200, 50
    expected_grey = np.repeat(grey[..., None], 3, axis=2)
    assert (saved_png(csv, "tensor", torch.from_numpy(grey)) == expected_grey).all()
    assert (saved_png(csv, "numpy_hw", grey) == expected_grey).all()
    assert (saved_png(csv, "numpy_hwc", colour) == colour).all()
    assert (saved_png(csv, "numpy_chw", np.moveaxis(colour, -1, 0).copy()) == colour).all()  # last axis: 5
    assert (saved_png(csv, "numpy_float", grey / 255.0) == expected_grey).all()
    assert (saved_png(csv, "pil_rgb", Image.fromarray(colour)) == colour).all()
    assert (saved_png(csv, "pil_grey", Image.fromarray(grey)) == expected_grey).all()
    assert (saved_png(csv, "pil_rgba", Image.fromarray(colour).convert("RGBA")) == colour).all()
    sixteen = Image.fromarray(np.array([[0, 65535]], dtype=np.uint16))
    assert saved_png(csv, "pil_16bit", sixteen)[0].tolist() == [[0, 0, 0], [255, 255, 255]]
    mask = torch.tensor([[True, False], [False, True]])
    assert saved_png(csv, "bools", mask)[..., 0].tolist() == [[255, 0], [0, 255]]  # not 1/255: near-black
    assert saved_png(csv, "numpy_bools", mask.numpy())[..., 0].tolist() == [[255, 0], [0, 255]]
    assert saved_png(csv, "pil_bits", Image.fromarray(mask.numpy()).convert("1"))[..., 0].tolist() == [[255, 0],
                                                                                                        [0, 255]]
    figure = matplotlib.figure.Figure(figsize=(2, 1), dpi=50)
    figure.patch.set_facecolor((1.0, 0.0, 0.0))
    drawn = saved_png(csv, "figure", figure)
    assert drawn.shape == (50, 100, 3) and drawn[0, 0].tolist() == [255, 0, 0]


def test_large_pictures_are_logged_at_most_max_side_pixels_a_side(tmp_path):
    import matplotlib.figure

    from lightning_spectral.pictures.loggers import MAX_SIDE

    csv = CSVLogger(tmp_path)
    image = torch.ones(1, 3 * MAX_SIDE, 100)
    image[:, -3:] = 0.0  # white, then three black rows
    drawn = saved_png(csv, "tall", image)
    assert drawn.shape == (MAX_SIDE, 34, 3)  # averaged over 3 x 3 cells (the last column over 3 x 1)
    assert drawn[0, 0].tolist() == [255, 255, 255] and drawn[-1, 0].tolist() == [0, 0, 0]
    figure = matplotlib.figure.Figure(figsize=(400, 100), dpi=100)  # 40,000 x 10,000 pixels at full size
    assert saved_png(csv, "wide", figure).shape == (MAX_SIDE // 4, MAX_SIDE, 3)
    assert figure.dpi == 100  # the figure is left as it was


@pytest.mark.parametrize(
    "tag, picture, step, error, match",
    [
        ("t", None, 1, TypeError, r"`picture` must be an image .* or a matplotlib figure, got None"),
        ("t", "image.png", 1, TypeError, r"got the string 'image.png'; .*PIL.Image.open\(path\)"),
        (3, torch.zeros(3, 2, 2), 1, TypeError, r"`tag` must be a string"),
        ("t", torch.zeros(3, 2, 2), 1.5, ValueError, r"`step` must be an integer >= 0"),
        ("t", torch.zeros(3, 2, 2), float("nan"), ValueError, r"`step` must be an integer >= 0.*nan"),
        ("t", torch.zeros(3, 2, 2), -1, ValueError, r"`step` must be an integer >= 0.*-1"),
    ],
)
def test_bad_pictures_tags_and_steps_call_no_logger(tmp_path, tag, picture, step, error, match):
    class Recording(Logger):
        calls = 0

        @property
        def name(self):
            return "recording"

        @property
        def version(self):
            return 0

        @property
        def experiment(self):
            Recording.calls += 1
            return self

        def add_image(self, *args, **kwargs):
            pass

        def add_figure(self, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            pass

        def log_hyperparams(self, params, *args, **kwargs):
            pass

    from types import SimpleNamespace

    csv = CSVLogger(tmp_path)
    trainer = SimpleNamespace(loggers=[Recording(), csv], global_step=0)
    with pytest.raises(error, match=match):
        log_picture(trainer, tag, picture, step)
    assert Recording.calls == 0
    assert not os.path.isdir(csv.log_dir) or not os.listdir(csv.log_dir)


# ---------------------------------------------------------------------------------------------------------------
# text: the lines a person reads (galleries' rows), to every logger that holds text
# ---------------------------------------------------------------------------------------------------------------

LINES = "1 significant missing mode in 1 region\nmissing region 1: class 7 (19 of its top 20), about 10 % of the reference"


def test_text_reaches_tensorboard_and_a_file_beside_csv_logs(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board, csv = TensorBoardLogger(tmp_path / "tb"), CSVLogger(tmp_path / "csv")
    assert log_text(board, "val/finc/missing", LINES, step=3) == ["tensorboard"]
    assert log_text(board, "val/finc/missing", "missing region 1: about 9 % of the reference", step=6) == ["tensorboard"]
    board.experiment.flush()
    events = EventAccumulator(board.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    texts = [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors("val/finc/missing/text_summary")]
    assert texts == [(3, LINES), (6, "missing region 1: about 9 % of the reference")]
    for step in (3, 6):
        assert log_text(csv, "val/finc/missing", LINES, step=step) == ["csv"]
    with open(os.path.join(csv.log_dir, "val_finc_missing.txt"), encoding="utf-8") as file:
        assert file.read() == f"[step 3]\n{LINES}\n[step 6]\n{LINES}\n"  # appended, never overwritten
    with pytest.warns(UserWarning, match="cannot hold pictures or text"):
        assert log_text(NoPictures(), "tag", LINES) == []


def test_wandb_offline_run_holds_the_text_as_a_table(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import json

    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="text")
    assert log_text(logger, "val/finc/missing", LINES, step=3) == ["wandb"]
    logger.experiment.finish()
    tables = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "table" / "**" / "*.json"),
                       recursive=True)
    assert len(tables) == 1, glob.glob(str(tmp_path / "wandb" / "**" / "*"), recursive=True)
    with open(tables[0], encoding="utf-8") as file:
        table = json.load(file)
    assert table["columns"] == ["text"] and table["data"] == [[LINES]]


def test_mlflow_sqlite_store_holds_the_text_as_an_artifact(tmp_path):
    pytest.importorskip("mlflow")
    from lightning.pytorch.loggers import MLFlowLogger
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    logger = MLFlowLogger(experiment_name="text", tracking_uri=uri, artifact_location=str(tmp_path / "artifacts"))
    assert log_text(logger, "val/finc/missing", LINES, step=3) == ["mlflow"]
    client = MlflowClient(uri)
    assert [item.path for item in client.list_artifacts(logger.run_id, "text")] == ["text/val_finc_missing-step3.txt"]
    path = client.download_artifacts(logger.run_id, "text/val_finc_missing-step3.txt", str(tmp_path / "out"))
    with open(path, encoding="utf-8") as file:
        assert file.read() == LINES


def comet_offline_archive(tmp_path, monkeypatch):
    """A CometLogger writing an offline archive under tmp_path. Lightning's ``CometLogger(online=False)`` sets
    Comet's ``disabled=True`` (nothing is recorded), so offline mode is chosen through Comet's own setting."""
    monkeypatch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")  # read at import: no error reports over the network
    monkeypatch.setenv("COMET_START_ONLINE", "false")
    monkeypatch.setenv("COMET_OFFLINE_DIRECTORY", str(tmp_path / "comet"))
    monkeypatch.setenv("COMET_LOGGING_CONSOLE", "error")
    pytest.importorskip("comet_ml")
    from lightning.pytorch.loggers import CometLogger

    return CometLogger(project="pictures")


def comet_uploads(tmp_path, logger):
    """End the experiment and return its archive's uploads: [(upload type, metadata, step, file bytes)]."""
    import json
    import zipfile

    logger.experiment.end()
    archives = glob.glob(str(tmp_path / "comet" / "*.zip"))
    assert len(archives) == 1, archives
    uploads = []
    with zipfile.ZipFile(archives[0]) as archive:
        for line in archive.read("messages.json").decode().splitlines():
            message = json.loads(line)
            if message.get("type") == "file_upload":
                payload = message["payload"]
                step = (payload.get("additional_params") or {}).get("step")
                data = archive.read(payload["file_path"])
                uploads.append((payload["upload_type"], payload.get("metadata"), step, data))
    return uploads


def test_comet_offline_archive_holds_the_gallery_and_the_text(tmp_path, monkeypatch):
    logger = comet_offline_archive(tmp_path, monkeypatch)
    trainer = fit(tmp_path, logger)
    assert log_text(logger, "val/finc/missing", LINES, step=3) == ["comet"]
    uploads = comet_uploads(tmp_path, logger)
    pictures = [data for kind, _, _, data in uploads if kind == "visualization"]
    assert len(pictures) == 2 and all(data.startswith(b"\x89PNG") for data in pictures)  # one gallery an epoch
    texts = [(metadata["tag"], step, data.decode()) for kind, metadata, step, data in uploads if kind == "text-sample"]
    assert [(tag, step) for tag, step, _ in texts] == [("val/vendi/modes", 3), ("val/vendi/modes", 6),
                                                        ("val/finc/missing", 3)]  # the callback's lines, then ours
    assert texts[0][2].startswith("top 2 modes, best samples first\nmode 1: about") and texts[2][2] == LINES
    assert trainer.state.finished
