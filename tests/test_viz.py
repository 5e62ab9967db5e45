import matplotlib.pyplot as plt
import pytest
import torch

from lightning_spectral.viz import log_figure, log_image, mode_gallery, plot_spectrum


def test_gallery_has_one_row_per_mode_best_first_and_pads_short_rows():
    images = torch.arange(6).float().view(6, 1, 1, 1).expand(6, 1, 4, 4) + torch.rand(6, 1, 4, 4) * 0.01
    samples = [(torch.tensor([5, 3]), torch.tensor([2.0, 1.0])), (torch.tensor([1]), torch.tensor([0.5]))]
    grid = mode_gallery(samples, images, padding=1, normalize=False)
    assert grid.shape == (3, 2 * 5 + 1, 2 * 5 + 1)
    assert float(grid[0, 1:5, 1:5].mean()) == pytest.approx(5.0, abs=0.01)  # row 0, slot 0: sample 5
    assert float(grid[0, 1:5, 6:10].mean()) == pytest.approx(3.0, abs=0.01)  # row 0, slot 1: sample 3
    assert float(grid[0, 6:10, 6:10].abs().max()) == 0.0  # row 1 has one sample: the slot stays blank


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
    plt.close(figure)


def test_logging_to_a_logger_without_images_raises_a_clear_error():
    class NoImages:
        experiment = object()

    with pytest.raises(TypeError, match="TensorBoardLogger"):
        log_image(NoImages(), "tag", torch.zeros(3, 2, 2))
    with pytest.raises(TypeError, match="add_figure"):
        log_figure(NoImages(), "tag", plot_spectrum(torch.ones(2)))
