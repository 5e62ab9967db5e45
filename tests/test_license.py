"""The repository and its wheel carry the Apache-2.0 licence that pyproject.toml declares."""

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]


def test_the_license_file_is_apache_2_and_goes_into_the_wheel():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    # setuptools copies license-files into the wheel's .dist-info/licenses/ (PEP 639)
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
