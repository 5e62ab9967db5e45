import pytest
import torch

from lightning_spectral.pictures import log_picture, mode_gallery, plot_spectrum


def test_gallery_has_one_row_per_mode_best_first_and_pads_short_rows():
    images = torch.arange(6).float().view(6, 1, 1, 1).expand(6, 1, 4, 4) + torch.rand(6, 1, 4, 4) * 0.01
    samples = [(torch.tensor([5, 3]), torch.tensor([2.0, 1.0])), (torch.tensor([1]), torch.tensor([0.5]))]
    grid = mode_gallery(samples, images, padding=1, normalize=False, tile_size=4)  # 4 px tiles: not enlarged
    assert grid.shape == (3, 2 * 5 + 1, 2 * 5 + 1)
    assert float(grid[0, 1:5, 1:5].mean()) == pytest.approx(5.0, abs=0.01)  # row 0, slot 0: sample 5
    assert float(grid[0, 1:5, 6:10].mean()) == pytest.approx(3.0, abs=0.01)  # row 0, slot 1: sample 3
    assert float(grid[0, 6:10, 6:10].min()) == 1.0  # row 1 has one sample: the slot stays blank (white)
    enlarged = mode_gallery(samples, images, padding=1, normalize=False)  # the default: 4 px enlarged to 64
    assert enlarged.shape == (3, 2 * 65 + 1, 2 * 65 + 1)
    assert float(enlarged[0, 1:65, 1:65].mean()) == pytest.approx(5.0, abs=0.01)


def test_gallery_accepts_a_function_and_grayscale_2d_images():
    grid = mode_gallery([(torch.tensor([0, 1]), torch.ones(2))], lambda i: torch.rand(8, 8))
    assert grid.shape[0] == 3 and 0.0 <= float(grid.min()) and float(grid.max()) <= 1.0


def test_gallery_errors():
    with pytest.raises(ValueError, match="no samples"):
        mode_gallery([(torch.tensor([], dtype=torch.long), torch.tensor([]))], torch.rand(3, 1, 4, 4))
    with pytest.raises(ValueError, match=r"expected \(C, H, W\)"):
        mode_gallery([(torch.tensor([0]), torch.ones(1))], torch.rand(3, 5, 4, 4))


def test_spectrum_plot_marks_the_threshold():
    figure = plot_spectrum(torch.tensor([0.3, 0.1, 0.02, -0.01]), threshold=0.05)
    axis = figure.axes[0]
    assert len(axis.patches) == 4
    colors = [patch.get_facecolor() for patch in axis.patches]
    assert colors[0] == colors[1] != colors[2]  # above the threshold vs below


def test_gallery_rows_carry_their_labels():
    images = torch.zeros(4, 1, 8, 8)
    plain = mode_gallery([(torch.tensor([0, 1]), torch.ones(2))] * 2, images, normalize=False)
    labelled = mode_gallery([(torch.tensor([0, 1]), torch.ones(2))] * 2, images, normalize=False,
                            labels=["mode 1: 40.0% of the mass", "mode 2: 3.0% of the mass"])
    strip = labelled[:, :, : labelled.shape[2] - plain.shape[2]]
    assert labelled.shape[1] == plain.shape[1] and strip.shape[2] > 0
    assert float(strip.min()) < 0.5  # dark text on the white strip
    torch.testing.assert_close(labelled[:, :, strip.shape[2]:], plain)
    with pytest.raises(ValueError, match="one label per mode"):
        mode_gallery([(torch.tensor([0]), torch.ones(1))], images, labels=["a", "b"])


def test_importing_the_library_leaves_the_matplotlib_backend_alone():
    """The issue: importing lightning_spectral.callbacks ran matplotlib.use("Agg") and switched a notebook's
    backend. A fresh interpreter picks a backend, imports everything, and the backend is unchanged."""
    import subprocess
    import sys

    code = (
        "import matplotlib; matplotlib.use('svg'); "
        "import lightning_spectral.callbacks, lightning_spectral.pictures, lightning_spectral.metrics, lightning_spectral.cli; "
        "print(matplotlib.get_backend())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "svg"


def test_importing_the_metrics_adds_no_heavy_dependency():
    """`import lightning_spectral.metrics` adds neither matplotlib, open_clip, timm nor scikit-learn to what
    torchmetrics and lightning import themselves (torchmetrics itself imports matplotlib.pyplot)."""
    import subprocess
    import sys

    code = (
        "import sys; import torchmetrics, lightning; before = set(sys.modules); "
        "import lightning_spectral.metrics, lightning_spectral.functional; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    added = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    heavy = [name for name in added if name.split(".")[0] in ("matplotlib", "open_clip", "timm", "sklearn")]
    assert heavy == [], heavy
    assert any(name.startswith("lightning_spectral.metrics") for name in added)  # the import happened


def test_logging_to_a_logger_without_images_warns_once_naming_what_to_do():
    class NoImages:
        experiment = object()

    target = NoImages()
    with pytest.warns(UserWarning, match="TensorBoardLogger, WandbLogger, MLFlowLogger"):
        log_picture(target, "tag", torch.zeros(3, 2, 2))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second picture to the same logger: no second warning
        log_picture(target, "tag", plot_spectrum(torch.ones(2)))


def test_importing_the_callbacks_and_encoders_adds_no_heavy_dependency():
    """GeneratedSamples and the image extractors import matplotlib, open_clip and timm only when used."""
    import subprocess
    import sys

    code = (
        "import sys; import torchmetrics, lightning; before = set(sys.modules); "
        "import lightning_spectral.callbacks, lightning_spectral.encoders; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    added = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    heavy_packages = ("matplotlib", "open_clip", "timm", "sklearn", "torchvision")
    heavy = [name for name in added if name.split(".")[0] in heavy_packages]
    assert heavy == [], heavy
    assert "lightning_spectral.callbacks.generated" in added and "lightning_spectral.encoders.extractors" in added


def test_metric_plot_draws_values_over_steps_like_torchmetrics():
    from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi

    vendi = FKEAVendi(sigma=1.0, n_frequencies=32, alpha=[1, 2])
    values = []
    for step in range(4):
        vendi.update(torch.randn(30, 2, generator=torch.Generator().manual_seed(step)) * (step + 1))
        values.append(vendi.compute())
    _, axis = vendi.plot(values)
    assert len(axis.lines) >= 2 and all(len(line.get_xdata()) == 4 for line in axis.lines[:2])  # orders 1 and 2
    _, axis = vendi.plot()  # the current value
    assert axis.get_ylabel() == "FKEAVendi"
    generator = torch.Generator().manual_seed(0)
    for metric in (FINCNovelty(sigma=1.0, n_frequencies=16), FastMMD(sigma=[1.0, 2.0], n_frequencies=16)):
        metric.update(torch.randn(40, 2, generator=generator), real=True)
        metric.update(torch.randn(40, 2, generator=generator) + 1.0, real=False)
        figure, _ = metric.plot()
        assert figure is not None


def test_spectrum_plots_of_every_metric():
    from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi, RFFCovariance, SPECDivergence

    generator = torch.Generator().manual_seed(0)
    finc = FINCNovelty(sigma=1.0, n_frequencies=32, rho=1.0)  # one novel cluster, one mode
    finc.update(torch.randn(200, 2, generator=generator) * 0.1, real=True)
    finc.update(torch.randn(200, 2, generator=generator) * 0.1 + 10.0, real=False)
    figure, (novel, missing) = finc.reading().plot_spectrum(top=8)
    assert len(figure.axes) == 2 and len(novel.patches) == 8
    for axis, side in ((novel, False), (missing, True)):  # the dashed line is the significance threshold
        dashed = [line for line in axis.lines if line.get_linestyle() == "--"]
        assert dashed and dashed[0].get_ydata()[0] == pytest.approx(finc.reading().threshold(missing=side))
    assert "1 significant" in novel.get_title()
    _, single = finc.reading().plot_spectrum(top=5, missing=True)
    assert single.get_title().startswith("missing modes")

    vendi = FKEAVendi(sigma=1.0, n_frequencies=16)
    vendi.update(torch.randn(50, 2, generator=generator))
    _, axis = vendi.reading().plot_spectrum(top=6)
    heights = [patch.get_height() for patch in axis.patches]
    torch.testing.assert_close(torch.tensor(heights, dtype=torch.float64), vendi.reading().modes(6).eigenvalues)

    covariance = RFFCovariance(sigma=1.0, n_frequencies=16)
    covariance.update(torch.randn(50, 2, generator=generator))
    _, axis = covariance.plot()  # a matrix value: its spectrum
    assert len(axis.patches) == 32

    mmd = FastMMD(sigma=[1.0, 2.0, 4.0], n_frequencies=16)
    mmd.update(torch.randn(40, 2, generator=generator), real=True)
    mmd.update(torch.randn(40, 2, generator=generator), real=False)
    _, (statistic, p_value) = mmd.reading().plot_spectrum()
    assert len(statistic.patches) == 3 and len(p_value.patches) == 3  # per bandwidth

    spec = SPECDivergence("cosine", in_features=(3, 2))
    x = torch.randn(60, 3, generator=generator)
    spec.update(x, x[:, :2])
    _, axis = spec.reading().plot_spectrum()
    assert max(abs(patch.get_height()) for patch in axis.patches) == pytest.approx(float(spec.compute()))
    with pytest.raises(ValueError, match="2 panels"):
        finc.reading().plot_spectrum(ax=axis)
