"""The `lightning-spectral` command line against the library's Python API on the same data, errors, torchrun."""

import inspect
import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lightning_spectral.algebra import one_thread as linalg_one_thread
from lightning_spectral.cli import compare as compare_command
from lightning_spectral.cli import evaluate as evaluate_command
from lightning_spectral.cli import main
from lightning_spectral.cli import ood as ood_command
from lightning_spectral.encoders import save_features
from lightning_spectral.functional import (
    detection_metrics,
    detection_standard_errors,
    rate_standard_error,
    spec,
    spec_diff_exact,
    threshold_at_tpr,
    threshold_standard_error,
)
from lightning_spectral.metrics import FastMMD, FINCNovelty, FKEAVendi, KernelPCAOOD, SPECDivergence
from lightning_spectral.metrics.mmd_reading import MMDReading

SUFFIXES = (".npy", ".pt", ".safetensors")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def one_thread():
    """Small eigendecompositions run 100x slower with 2 OpenMP threads on a 2-core machine that is busy."""
    with linalg_one_thread():
        yield


def subprocess_env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def blobs(n, d=16, k=4, spread=6.0, noise=0.3, seed=0, extra=0, dtype=np.float32):
    """n samples of k Gaussian modes in R^d (centres fixed by d and k), plus ``extra`` modes from centre seed 99."""
    centres = np.random.default_rng(1000 + d).normal(size=(k, d)) * spread
    if extra:
        centres = np.concatenate([centres, np.random.default_rng(99).normal(size=(extra, d)) * spread])
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(centres), size=n)
    return (centres[labels] + noise * rng.normal(size=(n, d))).astype(dtype)


def write(path, array, index=None):
    save_features(path, torch.from_numpy(np.ascontiguousarray(array)), index=index)
    return str(path)


def cli(capsys, *argv):
    """Run ``main`` in this process; returns (exit code, parsed JSON or None, stderr)."""
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def close(a, b, rtol=1e-6):
    return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=1e-12)


def test_flag_defaults_are_the_library_defaults():
    def default(fn, name):
        return inspect.signature(fn).parameters[name].default

    assert evaluate_command.DEFAULTS == {
        "n_frequencies": default(FKEAVendi, "n_frequencies"),
        "rho": default(FINCNovelty, "rho"),
        "significance": default(FINCNovelty, "significance"),
        "min_eigenvalue": default(FINCNovelty, "min_eigenvalue"),
        "mmd_level": default(MMDReading.test, "level"),
    }
    assert default(FKEAVendi, "n_frequencies") == default(FINCNovelty, "n_frequencies")
    assert compare_command.DEFAULTS == {
        "n_frequencies": default(SPECDivergence, "n_frequencies"),
        "top_k": default(spec, "k"),
        "per_cluster": default(spec, "per_cluster"),
    }
    assert ood_command.DEFAULTS == {name: default(KernelPCAOOD, name) for name in ood_command.DEFAULTS}


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_evaluate_equals_the_metrics_on_the_whole_array(tmp_path, capsys, suffix):
    x = blobs(900, seed=1)
    y = blobs(700, seed=2, extra=1)  # the reference holds a fifth mode that FILE misses
    file, ref = write(tmp_path / f"x{suffix}", x), write(tmp_path / f"y{suffix}", y)
    sigma, r = 6.0, 128
    code, out, err = cli(
        capsys, "evaluate", file, "--sigma", sigma, "--reference", ref, "--n-frequencies", r, "--seed", 3,
        "--alpha", "1", "2", "inf", "--batch-size", 100, "--top-k", 3, "--missing-modes",
    )
    assert code == 0, err
    assert out["inputs"]["file"]["n"] == 900 and out["inputs"]["file"]["d"] == 16
    assert out["inputs"]["reference"]["n"] == 700 and out["arguments"]["sigma"] == sigma

    gen, real = torch.from_numpy(x), torch.from_numpy(y)
    vendi = FKEAVendi(sigma, r, alpha=[1, 2, "inf"], seed=3)
    vendi.update(gen)
    expected = vendi.compute()
    for label, order in (("1", 1), ("2", 2), ("inf", "inf")):
        assert close(out["vendi"][label], expected[order]), (label, out["vendi"][label], expected[order])
    assert 3.8 < out["vendi"]["2"] < 4.6  # four tight modes, far apart: RKE counts them
    modes = vendi.reading().modes(3).eigenvalues
    assert all(close(a, b) for a, b in zip(out["modes"]["eigenvalues"], modes.tolist(), strict=True))

    finc = FINCNovelty(sigma, r, seed=3)
    finc.update(real, real=True)
    finc.update(gen, real=False)
    assert close(out["finc"]["novelty"], finc.compute()) and close(out["finc"]["threshold"], finc.reading().threshold())
    novel, missing = finc.reading().novel_modes(3), finc.reading().missing_modes(3)
    assert np.allclose(out["finc"]["novel_eigenvalues"], novel.eigenvalues.numpy(), rtol=1e-6)
    assert np.allclose(out["finc"]["missing"]["eigenvalues"], missing.eigenvalues.numpy(), rtol=1e-6)
    # the fifth mode, absent from FILE, is the one missing mode; it outweighs FILE's 1/4-vs-1/5 over-representations
    assert out["finc"]["missing"]["n_significant"] == 1
    assert out["finc"]["missing"]["eigenvalues"][0] > 2 * max(out["finc"]["novel_eigenvalues"])

    mmd = FastMMD(sigma, r, seed=3)
    mmd.update(real, real=True)
    mmd.update(gen, real=False)
    test = mmd.reading().test(level=0.05)
    assert close(out["mmd"]["mmd2"], mmd.compute()) and close(out["mmd"]["mmd2_biased"], test.statistic)
    assert close(out["mmd"]["p_value"], test.p_value, rtol=1e-5) and out["mmd"]["reject"] is True
    assert out["mmd"]["p_value"] < 1e-6

    # standard errors beside each score, with the n and 2r they were computed at
    assert close(out["mmd"]["se"], mmd.reading().standard_error()) and out["mmd"]["n_features"] == 2 * r
    assert (out["mmd"]["n"], out["mmd"]["n_real"], out["n"], out["n_features"]) == (900, 700, 900, 2 * r)
    assert close(out["finc"]["novelty_se"], finc.reading().summary()["se"])
    assert close(out["finc"]["missing"]["se"], finc.reading().summary()["missing_se"]) and out["finc"]["missing"]["se"] > 0
    assert out["se_draws"] == finc.noise_draws  # FILE's draws are FINC's generated side's
    from lightning_spectral.functional.fkea import vendi_standard_errors

    errors = vendi_standard_errors(finc.gen[0].noise_sums(), [1, 2, "inf"])
    for label, order in (("1", 1), ("2", 2), ("inf", "inf")):
        assert close(out["vendi_se"][label], errors[order]) and out["vendi_se"][label] > 0


def test_evaluate_truncation_zero_omits_the_truncated_score_and_a_negative_one_is_refused(tmp_path, capsys):
    file = write(tmp_path / "x.npy", blobs(200, seed=5))
    code, out, err = cli(capsys, "evaluate", file, "--sigma", 6, "--n-frequencies", 64, "--truncation", 0)
    assert code == 0, err
    assert "vendi_truncated" not in out and "vendi_truncated_se" not in out
    code, _, err = cli(capsys, "evaluate", file, "--sigma", 6, "--truncation", -1)
    assert code == 2 and "--truncation" in err


def test_evaluate_one_distribution_against_itself(tmp_path, capsys):
    file, ref = write(tmp_path / "x.npy", blobs(800, seed=5)), write(tmp_path / "y.pt", blobs(800, seed=6))
    code, out, err = cli(capsys, "evaluate", file, "--sigma", 6, "--reference", ref, "--n-frequencies", 128)
    assert code == 0, err
    assert out["finc"]["novelty"] == 0.0 and out["finc"]["n_significant"] == 0
    assert out["mmd"]["p_value"] > 0.05 and out["mmd"]["reject"] is False
    assert set(out["vendi"]) == {"1", "2"}  # the default orders: Vendi and RKE
    assert set(out["vendi_se"]) == {"1", "2"} and out["mmd"]["se"] > 0


def test_evaluate_picks_a_width_that_fits_the_rows(tmp_path, capsys):
    from lightning_spectral.kernels import frequencies_for

    file, ref = write(tmp_path / "x.npy", blobs(300, seed=5)), write(tmp_path / "y.npy", blobs(250, seed=6))
    code, out, err = cli(capsys, "evaluate", file, "--sigma", 6, "--reference", ref)  # --n-frequencies auto
    assert code == 0, err
    assert out["arguments"]["n_frequencies"] == "auto" and out["n_frequencies"] == 150 == frequencies_for(300)
    code, out, err = cli(capsys, "evaluate", file, "--sigma", 6, "--n-frequencies", 96)
    assert code == 0 and out["n_frequencies"] == 96
    assert [frequencies_for(n) for n in (1, 200, 2000, 4096, 10**6)] == [64, 100, 1000, 2048, 2048]
    code, _, err = cli(capsys, "evaluate", file, "--sigma", 6, "--n-frequencies", "wide")
    assert code != 0 and "expected an integer or 'auto'" in err


def two_views(n=400, seed=0):
    """Embedding A: 4 modes; embedding B of the same samples: modes 0 and 1 merged, B stretched x3."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(7).normal(size=(4, 12)) * 6
    labels = rng.integers(4, size=n)
    a = centres[labels] + rng.normal(size=(n, 12))
    merged = centres.copy()
    merged[1] = merged[0]
    b = 3 * (merged[labels] + rng.normal(size=(n, 12)))[:, :10]
    return a, b


def test_compare_equals_functional_spec(tmp_path, capsys):
    a, b = two_views()
    file_a, file_b = write(tmp_path / "a.pt", a), write(tmp_path / "b.safetensors", b)
    options = dict(kernel="gaussian", sigma_a=6.0, sigma_b=18.0, n_frequencies=64, seed=1, k=2, per_cluster=5)
    flags = ["--sigma-a", 6, "--sigma-b", 18, "--n-frequencies", 64, "--seed", 1, "--top-k", 2, "--per-cluster", 5]
    emb_a, emb_b = torch.from_numpy(a), torch.from_numpy(b)
    for method in ("covariance", "exact"):
        code, out, err = cli(capsys, "compare", file_a, file_b, *flags, "--method", method, "--batch-size", 64)
        assert code == 0, err
        assert out["inputs"]["a"]["d"] == 12 and out["inputs"]["b"]["d"] == 10 and out["inputs"]["b"]["n"] == 400
        expected = spec(emb_a, emb_b, method=method, **options)
        assert close(out["spec_diff"], expected.spec_diff), method
        values = expected.eigenvalues
        assert np.allclose(out["eigenvalues"]["positive"], values[values > 0][:2].numpy(), rtol=1e-6)
        assert np.allclose(out["eigenvalues"]["negative"], values[values < 0].flip(0)[:2].numpy(), rtol=1e-6)
        for side, clusters in (("clusters_a", expected.clusters_a), ("clusters_b", expected.clusters_b)):
            assert [c["ids"] for c in out[side]] == clusters.members.tolist(), (method, side)
            assert np.allclose([c["eigenvalue"] for c in out[side]], clusters.eigenvalues.numpy(), rtol=1e-6)
    # the exact route is the oracle; A groups modes 0 and 1 apart where B merges them: a positive cluster
    assert close(out["spec_diff"], spec_diff_exact(emb_a, emb_b, "gaussian", 6.0, 18.0))
    members = set(out["clusters_a"][0]["ids"])
    labels = np.argmin(((a[:, None, :] - np.random.default_rng(7).normal(size=(4, 12)) * 6) ** 2).sum(-1), 1)
    assert set(labels[sorted(members)]) <= {0, 1}

    code, out, err = cli(capsys, "compare", file_a, file_b, "--kernel", "cosine", "--top-k", 2)
    assert code == 0, err
    assert close(out["spec_diff"], spec(emb_a, emb_b, "cosine", method="covariance").spec_diff)


def circle(n, offset=0.0, seed=0, dim=16):
    """Points near 6 angles of a great circle of R^dim (random radius); ``offset`` shifts them between clusters."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(11).normal(size=(dim, 2)))[0]
    angles = rng.integers(6, size=n) * np.pi / 3 + offset + 0.12 * rng.normal(size=n)
    radius = 0.5 + 2.5 * rng.random((n, 1))
    return (radius * np.stack([np.cos(angles), np.sin(angles)], 1) @ basis.T).astype(np.float32)


def test_ood_equals_kernel_pca_and_detection_metrics(tmp_path, capsys):
    train, val, test, outside = circle(1500, seed=1), circle(400, seed=2), circle(500, seed=3), circle(
        500, offset=np.pi / 8, seed=4
    )
    paths = [write(tmp_path / f"{name}{suffix}", array) for name, array, suffix in (
        ("train", train, ".safetensors"), ("val", val, ".npy"), ("test", test, ".pt"), ("ood", outside, ".npy"))]
    scores_out = tmp_path / "out" / "scores.npy"
    code, out, err = cli(
        capsys, "ood", paths[0], paths[2], "--calibrate", paths[1], "--ood", paths[3], "--tpr", 0.9,
        "--sigma", 0.6, "--n-frequencies", 96, "--seed", 2, "--batch-size", 128, "--scores-out", scores_out,
    )
    assert code == 0, err
    detector = KernelPCAOOD("corp", sigma=0.6, n_frequencies=96, seed=2).fit([torch.from_numpy(train)])
    test_scores, ood_scores = detector.score(torch.from_numpy(test)), detector.score(torch.from_numpy(outside))
    np.testing.assert_allclose(np.load(scores_out), test_scores.numpy(), rtol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "scores.ood.npy"), ood_scores.numpy(), rtol=1e-5)
    assert out["model"]["n_components"] == detector.components_.shape[1]
    threshold = float(threshold_at_tpr(detector.score(torch.from_numpy(val)), 0.9))
    assert close(out["threshold"], threshold, rtol=1e-5)
    assert close(out["test"]["flagged_rate"], float((test_scores > threshold).double().mean()))
    metrics = detection_metrics(test_scores, ood_scores, tpr=0.9)
    assert close(out["ood"]["auroc"], metrics["auroc"]) and close(out["ood"]["fpr"], metrics["fpr"])
    assert 0.8 < out["ood"]["auroc"] < 1.0  # between the clusters: separable, not trivially
    errors = detection_standard_errors(test_scores, ood_scores, tpr=0.9)  # closed forms beside each estimate
    for key in ("auroc", "fpr"):
        assert close(out["ood"][f"{key}_se"], errors[f"{key}_se"], rtol=1e-4) and out["ood"][f"{key}_se"] > 0
    assert close(out["ood"]["threshold_at_tpr_se"], errors["threshold_se"], rtol=1e-4)
    val_scores = detector.score(torch.from_numpy(val))
    assert close(out["threshold_se"], threshold_standard_error(val_scores, 0.9), rtol=1e-4)
    assert close(out["test"]["flagged_rate_se"], rate_standard_error(out["test"]["flagged_rate"], 500), rtol=1e-4)
    assert close(out["ood"]["flagged_rate_se"], rate_standard_error(out["ood"]["flagged_rate"], 500), rtol=1e-4)
    assert close(out["test"]["mean"], test_scores.mean(), rtol=1e-5)
    top = test_scores.topk(16)
    assert out["most_ood"]["ids"] == top.indices.tolist()


def test_chunked_streaming_equals_one_shot(tmp_path, capsys):
    x, y = blobs(700, seed=1, dtype=np.float64), blobs(500, seed=2, extra=1, dtype=np.float64)
    file, ref = write(tmp_path / "x.npy", x), write(tmp_path / "y.safetensors", y)
    a, b = two_views(300)
    file_a, file_b = write(tmp_path / "a.npy", a), write(tmp_path / "b.pt", b)
    commands = {
        "evaluate": ["evaluate", file, "--sigma", 5, "--reference", ref, "--n-frequencies", 96, "--mode-samples"],
        "compare": ["compare", file_a, file_b, "--sigma-a", 6, "--sigma-b", 18, "--n-frequencies", 48],
        "ood": ["ood", file, file, "--ood", ref, "--n-frequencies", 64, "--sigma", 0.8],
    }
    for name, argv in commands.items():
        runs = []
        for batch_size in (37, 100000):
            code, out, err = cli(capsys, *argv, "--batch-size", batch_size)
            assert code == 0, err
            runs.append({key: value for key, value in out.items() if key not in ("arguments", "seconds")})
        np.testing.assert_allclose(_numbers(runs[0]), _numbers(runs[1]), rtol=1e-9, atol=1e-12, err_msg=name)


def _numbers(value):
    """Every number (booleans and ids included) in a JSON value, in order."""
    if isinstance(value, dict):
        return [n for key in sorted(value) for n in _numbers(value[key])]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    if isinstance(value, (bool, int, float)):
        return [float(value)]
    return []


def test_pictures_are_written(tmp_path, capsys):
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(10):  # different sizes: the galleries crop and resize
        Image.fromarray((rng.random((20 + i, 30, 3)) * 255).astype(np.uint8)).save(folder / f"{i}.png")
    listing = tmp_path / "images.txt"
    listing.write_text("".join(f"images/{i % 10}.png\n" for i in range(300)))
    file, ref = write(tmp_path / "x.npy", blobs(300, seed=1)), write(tmp_path / "y.npy", blobs(200, seed=2))
    plots = tmp_path / "plots"
    common = ["--plot-dir", plots, "--images", listing, "--thumb-size", 16]
    code, out, err = cli(
        capsys, "evaluate", file, "--sigma", 6, "--reference", ref, "--n-frequencies", 64, "--top-k", 2,
        "--per-mode", 3, *common,
    )
    assert code == 0, err
    novel = out["finc"]["n_significant"] > 0  # the novel gallery shows significant modes only
    assert set(out["pictures"]) == {"spectrum", "novel_spectrum", "modes"} | ({"novel_modes"} if novel else set())
    with Image.open(out["pictures"]["modes"]) as gallery:  # 2 modes x 3 samples, 16 px enlarged to 64, a title line
        assert gallery.size[0] > 3 * 66 + 2 and gallery.size[1] == 24 + 2 * 66 + 2  # + the label strip
    assert [len(mode["ids"]) for mode in out["modes"]["top_samples"]] == [3, 3]
    assert len(out["modes"]["shares"]) == 2 and all(0 < share <= 1 for share in out["modes"]["shares"])
    a, b = two_views(300)
    code, out, err = cli(capsys, "compare", write(tmp_path / "a.npy", a), write(tmp_path / "b.npy", b),
                         "--kernel", "cosine", "--top-k", 2, "--per-cluster", 4, *common)
    assert code == 0, err
    assert set(out["pictures"]) == {"spectrum", "clusters_a", "clusters_b"}
    code, out, err = cli(capsys, "ood", file, file, "--n-frequencies", 32, "--top-k", 5, *common)
    assert code == 0, err
    assert set(out["pictures"]) == {"spectrum", "most_ood"}
    with Image.open(out["pictures"]["most_ood"]) as gallery:  # one row of the 5 highest scores, id and score below
        assert gallery.size[0] > 5 * 66 + 2 and gallery.size[1] > 24 + 66 + 2 * 14
    for path in plots.iterdir():
        with Image.open(path) as picture:
            assert picture.format == "PNG" and min(picture.size) >= 20, path
    assert len(list(plots.iterdir())) == 8 + novel


class Evil:
    """Unpickling it would create the file ``marker`` (``open(marker, "w")``)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def bad_inputs(tmp_path):
    good = write(tmp_path / "good.npy", blobs(100))
    nan = blobs(100)
    nan[[3, 17]] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    np.save(tmp_path / "flat.npy", np.zeros(10, np.float32))
    np.save(tmp_path / "ints.npy", np.zeros((10, 16), np.int64))
    (tmp_path / "x.pkl").write_bytes(b"not read")
    torch.save({"features": torch.zeros(4, 16), "payload": Evil(str(tmp_path / "UNPICKLED"))}, tmp_path / "evil.pt")
    narrow = write(tmp_path / "narrow.safetensors", blobs(100, d=8))
    shorter = write(tmp_path / "shorter.pt", blobs(60))
    shuffled = write(tmp_path / "shuffled.npy", blobs(100), index=np.arange(100)[::-1].copy())
    return {
        "missing file": (["evaluate", tmp_path / "none.npy", "--sigma", 1], "no file at"),
        "pkl suffix": (["evaluate", tmp_path / "x.pkl", "--sigma", 1], "suffix '.pkl'"),
        "pickled object": (["evaluate", tmp_path / "evil.pt", "--sigma", 1], "refused to load"),
        "nan rows": (["evaluate", tmp_path / "nan.npy", "--sigma", 1], "NaN or Inf in rows 3, 17"),
        "1-d": (["evaluate", tmp_path / "flat.npy", "--sigma", 1], "2-D (N, d)"),
        "integers": (["evaluate", tmp_path / "ints.npy", "--sigma", 1], "floating-point"),
        "width mismatch": (["evaluate", good, "--sigma", 1, "--reference", narrow], "width mismatch"),
        "ood width mismatch": (["ood", good, narrow], "width mismatch"),
        "sigma": (["evaluate", good, "--sigma", -1], "`--sigma` must be a finite number > 0"),
        "unknown flag": (["evaluate", good, "--sigma", 1, "--bogus"], "unrecognized arguments: --bogus"),
        "no FILE": (["evaluate", "--sigma", 1], "FILE is required"),
        "FILE twice": (["evaluate", good, "--input1", good], "give FILE once"),
        "missing modes without a reference": (["evaluate", good, "--missing-modes"], "add `--reference REF`"),
        "rho without a reference": (["evaluate", good, "--rho", 2], "`--rho` compare FILE with a reference"),
        "alpha": (["evaluate", good, "--sigma", 1, "--alpha", "0"], "`--alpha` must be in (0, inf]"),
        "top-k": (["evaluate", good, "--sigma", 1, "--top-k", 0], "`--top-k` must be an integer >= 1"),
        "images without plot dir": (["evaluate", good, "--sigma", 1, "--images", "l.txt"], "needs `--plot-dir`"),
        "rows differ": (["compare", good, shorter, "--kernel", "cosine"], "SAME samples"),
        "nan rows in B": (["compare", good, tmp_path / "nan.npy", "--kernel", "cosine"], "`B` ("),
        "orders differ": (["compare", good, shuffled, "--kernel", "cosine"], "different orders"),
        "no bandwidths": (["compare", good, good], "needs `--sigma-a` and `--sigma-b`"),
        "tpr": (["ood", good, good, "--tpr", 1.5], "`--tpr` must be in (0, 1]"),
    }


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    for case, (argv, expected) in bad_inputs(tmp_path).items():
        code = main([str(arg) for arg in argv])
        out, err = capsys.readouterr()
        assert code == 2, (case, err)
        assert out == "" and err.endswith("\n") and err.count("\n") == 1, (case, err)
        assert "Traceback" not in err and expected in err, (case, err)
        assert err.startswith("lightning-spectral"), (case, err)
    assert not (tmp_path / "UNPICKLED").exists()  # the pickled object was refused, never run


def script():
    path = shutil.which("lightning-spectral", path=str(Path(sys.executable).parent))
    assert path is not None, "the console script is not installed: pip install -e ."
    return path


def test_console_script_with_default_flags(tmp_path):
    x = blobs(300, seed=4)
    file = write(tmp_path / "x.safetensors", x)
    run = subprocess.run([script(), "evaluate", file, "--sigma", "6"], capture_output=True, text=True,
                         env=subprocess_env(), timeout=240)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["arguments"]["n_frequencies"] == "auto" and out["arguments"]["alpha"] == ["1", "2"]
    from lightning_spectral.kernels import frequencies_for

    assert out["n_frequencies"] == frequencies_for(300)  # the width that fits 300 rows
    vendi = FKEAVendi(6.0, n_frequencies=frequencies_for(300), alpha=[1, 2])  # everything else at the class defaults
    vendi.update(torch.from_numpy(x))
    expected = vendi.compute()
    assert close(out["vendi"]["1"], expected[1]) and close(out["vendi"]["2"], expected[2])
    errors = vendi.reading().standard_error()  # no reference: FKEAVendi's own draws
    assert close(out["vendi_se"]["1"], errors[1]) and close(out["vendi_se"]["2"], errors[2])
    # the t-truncated score beside them by default (t = 100), as FKEAVendi(truncation=100) computes it
    truncated = FKEAVendi(6.0, n_frequencies=frequencies_for(300), alpha=[1, 2], truncation=100)
    truncated.update(torch.from_numpy(x))
    expected, errors = truncated.compute(), truncated.reading().standard_error()
    assert out["vendi_truncated"]["t"] == 100
    assert close(out["vendi_truncated"]["1"], expected[1]) and close(out["vendi_truncated"]["2"], expected[2])
    assert close(out["vendi_truncated_se"]["1"], errors[1]) and out["vendi_truncated"]["1"] <= out["vendi"]["1"] + 1e-9
    assert out["se_draws"] == vendi.noise_draws and out["n"] == 300
    assert out["inputs"]["file"] == {"path": file, "n": 300, "d": 16, "dtype": "float32", "indexed": False}


def test_module_entry_point_and_console_errors(tmp_path):
    good = write(tmp_path / "good.npy", blobs(50))
    run = subprocess.run([sys.executable, "-m", "lightning_spectral.cli", "evaluate", good, "--sigma", "1", "--nope"],
                         capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "unrecognized arguments: --nope" in run.stderr, run.stderr
    torch.save({"features": torch.zeros(4, 16), "payload": Evil(str(tmp_path / "UNPICKLED"))}, tmp_path / "evil.pt")
    run = subprocess.run([script(), "evaluate", str(tmp_path / "evil.pt"), "--sigma", "1"], capture_output=True,
                         text=True, env=subprocess_env(), timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "refused to load" in run.stderr, run.stderr
    assert run.stderr.count("\n") == 1 and not (tmp_path / "UNPICKLED").exists()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_two_processes_equal_one_process(tmp_path, capsys):
    file = write(tmp_path / "x.npy", blobs(1003, seed=1))  # shards of 500 and 503 rows (boundaries are even)
    ref = write(tmp_path / "y.safetensors", blobs(803, seed=2, extra=1))  # 401 would be odd: 400 and 403
    argv = ["evaluate", file, "--sigma", "6", "--reference", ref, "--n-frequencies", "128", "--batch-size", "128",
            "--top-k", "3", "--per-mode", "4", "--mode-samples", "--no-progress"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port()), "-m", "lightning_spectral.cli"]
    run = subprocess.run(launcher + argv, capture_output=True, text=True, env=subprocess_env(), timeout=240)
    assert run.returncode == 0, run.stderr
    ddp = json.loads(run.stdout)  # one JSON document: only rank 0 wrote
    code, single, err = cli(capsys, *argv)
    assert code == 0, err
    assert ddp["world_size"] == 2 and single["world_size"] == 1
    for section, key in [("vendi", "1"), ("vendi", "2"), ("finc", "novelty"), ("finc", "threshold"),
                         ("mmd", "mmd2"), ("mmd", "mmd2_biased"), ("mmd", "p_value")]:
        assert close(ddp[section][key], single[section][key]), (section, key, ddp[section][key], single[section][key])
    np.testing.assert_allclose(ddp["modes"]["eigenvalues"], single["modes"]["eigenvalues"], rtol=1e-6)
    # at the default rho = 2 the top novel eigenvalues are ~1e-4 (FILE over-represents nothing twofold): the sums'
    # summation order moves them by ~1e-9 in absolute terms, so they are compared absolutely as well
    np.testing.assert_allclose(ddp["finc"]["novel_eigenvalues"], single["finc"]["novel_eigenvalues"], rtol=1e-6,
                               atol=1e-8)
    for section in ("modes", "finc"):
        assert [m["ids"] for m in ddp[section]["top_samples"]] == [m["ids"] for m in single[section]["top_samples"]]
        # 2 = 1. FINC's shares are read along eigenvectors that Lanczos finds to a residual of 1e-10 ||A||; at the
        # default rho = 2 these modes' eigenvalues (~1e-4 to 1e-2) lie close together, so the summation order of
        # the sums moves their eigenvectors, and the shares, by ~1e-5 relative (measured up to 7e-5, and 6e-8 in
        # absolute terms on a share of 2.5e-4): shares agree to 1e-6 of the side's samples
        tolerance = dict(rtol=1e-6, atol=1e-9) if section == "modes" else dict(rtol=2e-4, atol=1e-6)
        shown = [value is not None for value in single[section]["shares"]]  # FINC: significant modes only
        assert [value is not None for value in ddp[section]["shares"]] == shown
        np.testing.assert_allclose([v for v in ddp[section]["shares"] if v is not None],
                                   [v for v in single[section]["shares"] if v is not None], **tolerance)
    assert len(single["modes"]["shares"]) == 3 and 0 < min(single["modes"]["shares"])
    finc_shares = [value for value in single["finc"]["shares"] if value is not None]
    assert all(0 <= value <= 1 for value in finc_shares)
    assert single["mmd"]["reject"] and ddp["mmd"]["reject"]


def test_evaluate_with_prompts_gives_the_conditional_scores(tmp_path, capsys):
    from lightning_spectral.metrics import ConditionalVendi

    labels = np.arange(600) % 4
    x = blobs(600, seed=3)
    x[labels == 2] = x[labels == 2][0]  # prompt 2 collapsed
    prompts = np.eye(4, dtype=np.float32)[labels]
    file, prompt_file = write(tmp_path / "x.npy", x), write(tmp_path / "prompts.npy", prompts)
    code, out, err = cli(capsys, "evaluate", file, "--sigma", 6, "--prompts", prompt_file, "--prompt-sigma", 0.1,
                         "--n-frequencies", 64, "--batch-size", 128, "--seed", 2)
    assert code == 0, err
    metric = ConditionalVendi(6.0, 0.1, 64, alpha=[1, 2], seed=2)
    metric.update(torch.from_numpy(x), torch.from_numpy(prompts))
    summary = metric.reading().summary()
    for order, label in ((1, "1"), (2, "2")):
        assert close(out["conditional"][label], summary[""][order])
        assert close(out["information"][label], summary["information"][order])
        assert close(out["prompt_vendi"][label], summary["prompt_vendi"][order])
        assert close(out["vendi"][label], summary["vendi"][order])  # the samples' side of the same draw as FKEA's
        assert close(out["conditional_se"][label], summary["se"][order]) and out["conditional_se"][label] > 0
        for key in ("information_se", "prompt_vendi_se"):
            assert close(out[key][label], summary[key][order]) and out[key][label] > 0
    assert out["inputs"]["prompts"]["n"] == 600


def test_evaluate_prompts_usage_errors(tmp_path, capsys):
    file = write(tmp_path / "x.npy", blobs(50))
    short = write(tmp_path / "p.npy", np.eye(4, dtype=np.float32)[np.arange(40) % 4])
    code, _, err = cli(capsys, "evaluate", file, "--sigma", 6, "--prompts", short, "--prompt-sigma", 0.1)
    assert code == 2 and "has 40 rows and FILE" in err and "one prompt per generated sample" in err
    code, _, err = cli(capsys, "evaluate", file, "--sigma", 6, "--prompts", short)
    assert code == 2 and "`--prompts` needs `--prompt-sigma`" in err
    code, _, err = cli(capsys, "evaluate", file, "--sigma", 6, "--prompt-sigma", 0.1)
    assert code == 2 and "`--prompt-sigma` belongs to `--prompts PROMPTS`" in err


def test_evaluate_torch_fidelity_spelling_auto_sigma_and_named_mode_samples(tmp_path, capsys):
    """--input1 / --input2, sigma="auto" by default (the metrics' rule over REF, reported), and each FINC mode's
    eigenvalue, p-value, share and top samples by row id."""
    from lightning_spectral.metrics.auto_bandwidth import reference_bandwidth

    x, y = blobs(600, seed=1), blobs(500, seed=2, extra=1)  # REF holds a fifth mode that FILE misses
    file, ref = write(tmp_path / "x.npy", x), write(tmp_path / "y.npy", y)
    code, out, err = cli(capsys, "evaluate", "--input1", file, "--input2", ref, "--n-frequencies", 128,
                         "--missing-modes", "--top-k", 2)
    assert code == 0, err
    assert close(out["sigma"], reference_bandwidth(torch.from_numpy(y), "test"))
    missing = out["finc"]["missing"]["modes"]
    assert missing[0]["significant"] and {"eigenvalue", "p_value", "share", "samples"} <= set(missing[0])
    extra = np.random.default_rng(99).normal(size=(1, 16)) * 6.0  # blobs' fifth centre
    assert np.linalg.norm(y[missing[0]["samples"]] - extra, axis=1).max() < 3.0  # its samples, named by row id
    assert 0.16 < missing[0]["share"] <= 0.22, missing[0]["share"]  # the fifth mode holds a fifth of REF
    binomial = (missing[0]["share"] * (1 - missing[0]["share"]) / 500) ** 0.5  # its standard error, about binomial
    assert 0.5 * binomial < missing[0]["share_se"] < 2 * binomial, (missing[0]["share_se"], binomial)
    for mode in out["finc"]["novel_modes"] + missing:  # a share (and se) for a significant mode only, never NaN
        assert (mode["share"] is None) == (not mode["significant"]) and (mode["share_se"] is None) >= (not mode["significant"])
        assert mode["share_se"] is None or mode["share_se"] >= 0
    assert missing[0]["region"] == 0 and out["finc"]["missing"]["n_regions"] == 1  # one region per missing cluster
    region = out["finc"]["missing"]["regions"][0]  # the gallery's row: its ends, share and samples by row id
    assert region["ends"] == [[1, 1]] and region["samples"] == missing[0]["samples"] and region["share_se"] > 0
    assert 0.16 < region["share"] <= 0.22 and "other_end_region" not in missing[0]
    # one share per mode: the mode's is its region's, the number its gallery row shows
    assert (missing[0]["share"], missing[0]["share_se"]) == (region["share"], region["share_se"])


def test_evaluate_names_two_missing_clusters_once_each_with_a_mode_s_other_end(tmp_path, capsys):
    """REF holds two clusters FILE lacks: the second missing mode is their contrast, whose other end lies in the
    first region; `regions` lists the gallery's two rows, one cluster each, with each cluster's share of REF."""
    x, y = blobs(600, seed=2), blobs(700, seed=3, extra=2)  # 2 of REF's 6 clusters missing from FILE
    file, ref = write(tmp_path / "x.npy", x), write(tmp_path / "y.npy", y)
    code, out, err = cli(capsys, "evaluate", file, "--reference", ref, "--n-frequencies", 128, "--missing-modes",
                         "--top-k", 4)
    assert code == 0, err
    missing = out["finc"]["missing"]
    assert missing["n_significant"] == 2 and missing["n_regions"] == 2
    assert missing["modes"][1]["other_end_region"] == 0 and [2, -1] in missing["regions"][0]["ends"]
    centres = np.random.default_rng(99).normal(size=(2, 16)) * 6.0  # blobs' extra centres
    clusters = []
    for region in missing["regions"]:
        nearest = ((y[region["samples"]][:, None] - centres[None]) ** 2).sum(-1).argmin(1)
        clusters.append(set(nearest.tolist()))
        assert 0.12 < region["share"] < 0.25, region["share"]  # each cluster is a sixth of REF
    assert sorted(map(tuple, clusters)) == [(0,), (1,)]


def test_evaluate_answers_which_modes_were_dropped_by_default_with_a_verdict_first(tmp_path, capsys):
    """`evaluate FILE --reference REF` as a torch-fidelity user types it: the missing modes are on (two of REF's six
    clusters are absent from FILE), the JSON opens with a `verdict` (what differs, which modes, how sure) and one line
    on stderr says the same; `--no-missing-modes` turns the missing side off, and the verdict says it was not asked."""
    x, y = blobs(600, seed=2), blobs(700, seed=3, extra=2)
    file, ref = write(tmp_path / "x.npy", x), write(tmp_path / "y.npy", y)
    code, out, err = cli(capsys, "evaluate", "--input1", file, "--input2", ref, "--n-frequencies", 128)
    assert code == 0, err
    assert next(iter(out)) == "verdict"  # the answer first
    verdict = out["verdict"]
    assert verdict["differs"] is True and verdict["mmd_p_value"] < 0.05
    assert len(verdict["missing_modes"]) == out["finc"]["missing"]["n_regions"] == 2  # the two absent clusters
    assert all(0.0 < region["p_value"] <= 0.05 and 0.12 < region["share"] < 0.25  # each a sixth of REF
               for region in verdict["missing_modes"])
    line = err.strip().splitlines()[-1]
    assert line == verdict["line"] and "differs" in line and "missing: 2 (region 1" in line and "Vendi-1" in line
    code, out, err = cli(capsys, "evaluate", file, "--reference", ref, "--n-frequencies", 128, "--no-missing-modes")
    assert code == 0, err
    assert "missing" not in out["finc"] and out["verdict"]["missing_modes"] is None
    assert "missing: not asked" in err
    code, out, err = cli(capsys, "evaluate", file, "--n-frequencies", 128, "--sigma", 6)  # no reference: diversity
    assert code == 0, err and set(out["verdict"]) == {"vendi", "vendi_se", "line"}
    assert err.strip().splitlines()[-1].startswith(f"evaluate {file}: Vendi-1 ")
