"""Every picture a person reads, rendered and checked: tiles of at least 64 px, a label on every row, the title a
gallery needs ("k significant, m shown"), the class or id and score under an image, FastMMD over epochs, the cut
of kernel PCA, A and B named in SPEC's spectrum."""

import pytest
import torch
from torch.utils.data import TensorDataset

from lightning_spectral.callbacks.galleries import IndexedImages
from lightning_spectral.metrics import FINCNovelty, FKEAVendi, SPECDivergence
from lightning_spectral.pictures import mode_gallery, plot_signed_spectrum, plot_spectrum, plot_test_history

g = torch.Generator().manual_seed(0)


def blobs(centres: torch.Tensor, n: int) -> torch.Tensor:
    return centres[torch.randint(len(centres), (n,), generator=g)] + 0.3 * torch.randn(n, centres.shape[1], generator=g)


def ink(strip: torch.Tensor) -> bool:
    """Whether a region of a picture holds text (any non-white pixel)."""
    return bool((strip < 0.9).any())


def test_gallery_tiles_are_enlarged_and_every_row_is_labelled():
    pictures = torch.rand(6, 1, 8, 8)
    rows = [(torch.tensor([0, 1, 2]), torch.ones(3)), (torch.tensor([3, 4]), torch.ones(2))]
    grid = mode_gallery(rows, pictures, labels=["mode 1: 50.0% of the mass", "mode 2: 20.0% of the mass"])
    plain = mode_gallery(rows, pictures)
    assert plain.shape[1:] == (2 + 2 * 66, 2 + 3 * 66)  # 8 px enlarged 8 times: 64 px tiles
    strip = grid[:, :, : grid.shape[2] - plain.shape[2]]  # the label strip left of the grid
    assert strip.shape[2] > 100  # wide enough for a 14 px font
    for row in range(2):  # text at the height of each row
        assert ink(strip[:, 2 + row * 66 : 2 + (row + 1) * 66])
    large = mode_gallery(rows, torch.rand(6, 3, 100, 80))
    assert large.shape[1] == 2 + 2 * 102  # images already large stay as they are


def test_a_title_and_captions_add_their_lines():
    pictures = torch.rand(4, 1, 8, 8)
    rows = [(torch.tensor([0, 1]), torch.ones(2)), (torch.tensor([2, 3]), torch.ones(2))]
    plain = mode_gallery(rows, pictures)
    titled = mode_gallery(rows, pictures, title="6 significant missing modes, 2 shown")
    assert titled.shape[1] > plain.shape[1] and ink(titled[:, : titled.shape[1] - plain.shape[1]])
    captioned = mode_gallery(rows, pictures, captions=[["id 0\n0.93", "id 1\n0.91"], ["id 2\n0.5", "id 3\n0.4"]])
    assert captioned.shape[1] >= plain.shape[1] + 2 * 2 * 14  # two lines of text under every image
    assert ink(captioned[:, 2 + 64 : 2 + 66 + 28, 2:66])  # the caption under the first image


def test_finc_gallery_says_how_many_modes_are_significant_and_how_many_are_shown():
    centres = torch.randn(6, 4, generator=g) * 6
    metric = FINCNovelty(sigma=2.0, n_frequencies=256)
    metric.update(blobs(centres[:2], 600), real=True)
    generated = blobs(centres, 600)  # four modes the reference lacks
    metric.update(generated, real=False)
    ids = torch.arange(600)
    found = metric.reading().galleries([(generated, ids)], k=2, per_mode=3)
    total = int(metric.reading().summary()["novel_modes"])
    assert total > 2
    novel = found["novel"]
    assert novel.title == f"{total} significant novel modes, 2 shown in 2 regions"
    assert len(novel.labels) == 2 and all("% of the generated samples" in label for label in novel.labels)


def test_fkea_and_spec_galleries_label_their_rows():
    centres = torch.randn(3, 4, generator=g) * 6
    x = blobs(centres, 300)
    vendi = FKEAVendi(sigma=2.0, n_frequencies=128)
    vendi.update(x)
    rows = vendi.reading().galleries([(x, torch.arange(300))], k=3, per_mode=4)["modes"]
    assert [label.split(":")[0] for label in rows.labels] == ["mode 1", "mode 2", "mode 3"]
    assert all("% of the samples (eigenvalue " in label for label in rows.labels)  # a share, then the eigenvalue
    spec = SPECDivergence("cosine")
    y = x @ torch.randn(4, 3, generator=g)
    spec.update(x, y)
    galleries = spec.reading().galleries([((x, y), torch.arange(300))], k=2, per_mode=3)
    assert "a groups, b does not" in galleries["a_only"].labels[0]
    assert galleries["a_only"].title == "clusters embedding a makes, b not"


def test_dataset_items_give_the_class_under_each_image():
    dataset = TensorDataset(torch.rand(5, 1, 8, 8), torch.tensor([3, 1, 4, 1, 5]))
    images, classes = IndexedImages(dataset, 2, 2).images(None, "samples", torch.tensor([2, 4]))
    assert images.shape == (2, 1, 8, 8) and classes.tolist() == [4, 5]
    _, none = IndexedImages(lambda i: torch.rand(8, 8), 2, 2).images(None, "samples", torch.tensor([0]))
    assert none is None


def test_fastmmd_over_epochs_draws_statistic_and_p_value():
    figure = plot_test_history([0, 1, 2], {"MMD^2": [0.1, 0.05, 0.0]}, {"p-value": [1e-8, 0.01, 0.0]}, level=0.05)
    left, right = figure.axes
    assert left.get_title().endswith("MMD^2 over epochs") and right.get_title().endswith("p-value over epochs")
    assert list(left.lines[0].get_xdata()) == [0, 1, 2] and right.get_yscale() == "log"
    assert min(right.lines[0].get_ydata()) > 0  # a p-value of 0 is drawn at the bottom of a log axis
    assert any(line.get_ydata()[0] == 0.05 for line in right.lines[1:])  # the test level
    assert figure.get_size_inches()[0] * figure.dpi >= 800


def test_the_ood_spectrum_marks_the_cut_even_past_fifty_components():
    figure = plot_spectrum(torch.linspace(1.0, 0.001, 300), title="133 components kept", cut=133)
    axis = figure.axes[0]
    assert len(axis.patches) == 143  # the cut and 10 beyond it
    assert [line.get_xdata()[0] for line in axis.lines if line.get_linestyle() == ":"] == [133.5]
    assert axis.get_legend().get_texts()[0].get_text() == "133 kept"
    grey = [patch for patch in axis.patches if patch.get_facecolor()[:3] != axis.patches[0].get_facecolor()[:3]]
    assert len(grey) == 10  # the components beyond the cut


def test_spec_spectrum_names_a_and_b():
    figure = plot_signed_spectrum(torch.tensor([0.3, -0.5, 0.1, -0.05]), names=("clip.npy", "dino.pt"))
    axis = figure.axes[0]
    assert axis.get_title() == "SPEC: A = clip.npy, B = dino.pt"
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend == ["clip.npy groups, dino.pt does not", "dino.pt groups, clip.npy does not"]
    heights = sorted(abs(patch.get_height()) for patch in axis.patches)
    assert heights == pytest.approx([0.05, 0.1, 0.3, 0.5])


def outside_the_figure(figure) -> list[str]:
    """The texts (titles, axis labels, tick labels) that a saved PNG of ``figure`` would cut off."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure) if figure.canvas is None or not hasattr(figure.canvas, "get_renderer") else None
    (canvas or figure.canvas).draw()
    renderer = figure.canvas.get_renderer()
    box = figure.bbox
    cut = []
    for axis in figure.axes:
        low, high = sorted(axis.get_ylim())
        ticks = [text for text in axis.get_yticklabels() if low <= text.get_position()[1] <= high]  # those drawn
        texts = [axis.title, axis.xaxis.label, axis.yaxis.label, *ticks, *axis.texts]
        for text in texts:
            if not text.get_text() or not text.get_visible():
                continue
            extent = text.get_window_extent(renderer)
            if extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1 or extent.y0 < box.y0 - 1 or extent.y1 > box.y1 + 1:
                cut.append(text.get_text())
    return cut


def test_every_plot_keeps_its_labels_inside_the_figure():
    from lightning_spectral.metrics import FastMMD

    finc = FINCNovelty(sigma=1.0, n_frequencies=16)
    finc.update(torch.randn(80, 2, generator=g) * 1e-3, real=True)
    finc.update(torch.randn(80, 2, generator=g) * 1e-3 + 1e-3, real=False)
    mmd = FastMMD(sigma=[1.0, 2.0], n_frequencies=16)
    mmd.update(torch.randn(40, 2, generator=g), real=True)
    mmd.update(torch.randn(40, 2, generator=g) + 5.0, real=False)
    value = finc.compute()
    figures = {
        "finc.plot()": finc.plot()[0],
        "finc.plot(values)": finc.plot([value, value * 1.0001, value * 0.9999])[0],  # long tick labels
        "finc.reading().plot_spectrum()": finc.reading().plot_spectrum()[0],
        "mmd.plot()": mmd.plot()[0],
        "mmd.reading().plot_spectrum()": mmd.reading().plot_spectrum()[0],
        "history": plot_test_history([0, 1], {"MMD^2": [0.1, 0.2]}, {"p-value": [1e-161, 0.3]}),
        "spectrum": plot_spectrum(torch.linspace(1, 0.01, 60), threshold=0.5),
        "signed": plot_signed_spectrum(torch.tensor([0.3, -0.2]), names=("a", "b")),
    }
    for name, figure in figures.items():
        assert all(axis.get_ylabel() for axis in figure.axes), name
        assert outside_the_figure(figure) == [], name


def test_p_values_below_1e_16_are_drawn_as_they_are():
    figure = plot_test_history([0, 1, 2], {"MMD^2": [0.4, 0.2, 0.3]}, {"p-value": [1e-161, 0.01, 0.0]})
    right = figure.axes[1]
    drawn = list(right.lines[0].get_ydata())
    assert drawn[:2] == [1e-161, 0.01]  # no floor at 1e-16
    assert drawn[2] == pytest.approx(1e-162)  # a zero: a decade below the smallest p-value
    assert right.get_ylim()[0] <= 1e-162  # the axis reaches down to the data


def test_a_single_value_is_drawn_as_a_labelled_bar_with_its_number():
    from lightning_spectral.metrics import FastMMD

    vendi = FKEAVendi(sigma=1.0, n_frequencies=16, alpha=[1, 2])
    vendi.update(torch.randn(50, 2, generator=g))
    figure, axis = vendi.plot()
    value = vendi.compute()
    assert len(axis.patches) == 2  # orders 1 and 2, a bar each
    assert [text.get_text() for text in axis.texts] == [f"{float(value[a]):.4g}" for a in (1, 2)]
    assert axis.get_ylabel() == "FKEAVendi" and axis.get_title().startswith("FKEAVendi = ")
    mmd = FastMMD(sigma=1.0, n_frequencies=16)
    mmd.update(torch.randn(40, 2, generator=g), real=True)
    mmd.update(torch.randn(40, 2, generator=g) + 9.0, real=False)
    _, (statistic, p_value) = mmd.reading().plot_spectrum()
    shown = float(mmd.reading().p_value())
    assert [text.get_text() for text in p_value.texts] == [f"{shown:.4g}"]  # the number, however small
