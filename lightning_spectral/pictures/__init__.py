"""Pictures: mode galleries and spectrum / test-history plots, and the one function that sends a picture to every
logger of a Trainer.
"""

from lightning_spectral.pictures.gallery import FONT_SIZE, ImageSource, enlarge, mode_gallery
from lightning_spectral.pictures.loggers import (
    Picture,
    as_array,
    log_picture,
    log_text,
    loggers_of,
    takes_pictures,
    warn_no_pictures,
)
from lightning_spectral.pictures.plots import (
    log_floor,
    panels,
    plot_labelled_value,
    plot_signed_spectrum,
    plot_spectra,
    plot_spectrum,
    plot_test_history,
    plot_values,
)

__all__ = [
    "as_array",
    "enlarge",
    "FONT_SIZE",
    "ImageSource",
    "log_picture",
    "log_text",
    "loggers_of",
    "log_floor",
    "mode_gallery",
    "panels",
    "Picture",
    "plot_labelled_value",
    "plot_signed_spectrum",
    "plot_spectra",
    "plot_spectrum",
    "plot_test_history",
    "plot_values",
    "takes_pictures",
    "warn_no_pictures",
]
