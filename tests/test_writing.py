"""Every file the library writes is written whole or not at all, and a failed write names the file
(lightning_spectral/files.py: `written`; its users: the command line, save_features, the recipes)."""

import errno
import json
import os
import sys
from pathlib import Path

import matplotlib.figure
import numpy as np
import pytest
import torch
import torchvision.utils

from lightning_spectral.cli import main as cli_main
from lightning_spectral.encoders import PrecomputedFeatures, save_features
from lightning_spectral.io import WriteError, check_writable, written

ROOT = Path(__file__).resolve().parents[1]


def disk_full(write):
    """``write`` that puts a few bytes on the disk, then fails as a full disk does."""

    def failing(*args, **kwargs):
        # the file it writes: a path (Path.write_text's self, savefig's or torch.save's argument) or an open file
        path = next(a if isinstance(a, (str, os.PathLike)) else a.name for a in args
                    if isinstance(a, (str, os.PathLike)) or hasattr(a, "write"))
        with open(path, "ab") as handle:
            handle.write(b"\x93NUMPY partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    return failing


def names(folder):
    return sorted(p.name for p in Path(folder).rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------------------------
# the helper
# ---------------------------------------------------------------------------------------------------------------


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(WriteError) as caught:
        with written(target, "--output") as temporary:
            temporary.write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    message = str(caught.value)
    assert str(target) in message and "`--output`" in message and "No space left" in message
    assert "free some space" in message and "\n" not in message
    assert target.read_text() == "old" and names(tmp_path) == ["out.json"]
    assert isinstance(caught.value, OSError) and caught.value.__cause__.errno == errno.ENOSPC


def test_other_errors_pass_through_and_leave_nothing(tmp_path):
    with pytest.raises(KeyError):
        with written(tmp_path / "a.npy") as temporary:
            temporary.write_bytes(b"x")
            raise KeyError("bug")
    assert names(tmp_path) == []


def test_a_whole_write_replaces_the_file_with_the_usual_permissions(tmp_path):
    target = tmp_path / "sub" / "scores.npy"
    with written(target) as temporary, open(temporary, "wb") as handle:
        np.save(handle, np.arange(3.0))
    assert np.load(target).tolist() == [0.0, 1.0, 2.0] and names(tmp_path) == ["scores.npy"]
    probe = tmp_path / "probe"
    probe.write_text("")
    assert target.stat().st_mode & 0o777 == probe.stat().st_mode & 0o777  # umask applied, not mkstemp's 0600


def test_unwritable_places_are_refused_by_name(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("")
    with pytest.raises(WriteError, match=r"`--output`: cannot create .*file.txt' is not a folder"):
        check_writable(blocker / "out.json", "--output")
    with pytest.raises(WriteError, match="`--output`: .* is a folder; give the path of a file"):
        check_writable(tmp_path, "--output")
    with pytest.raises(WriteError, match="`--plot-dir`: .* is a file; give the path of a folder"):
        check_writable(blocker, "--plot-dir", folder=True)
    with pytest.raises(WriteError, match="could not write"):
        with written(blocker / "out.json", "--output") as temporary:
            temporary.write_text("{}")


# ---------------------------------------------------------------------------------------------------------------
# the command line: --output, --scores-out, --plot-dir
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def embeddings(tmp_path):
    path = tmp_path / "in" / "x.npy"
    path.parent.mkdir()
    np.save(path, np.random.default_rng(0).normal(size=(120, 6)).astype(np.float32))
    return str(path)


def run_cli(capsys, *argv):
    code = cli_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "what, patch",
    [
        ("out.json", (Path, "write_text")),
        ("scores.npy", (np, "save")),
        ("ood_spectrum.png", (matplotlib.figure.Figure, "savefig")),
    ],
)
def test_the_cli_on_a_full_disk_leaves_no_partial_file_and_names_it(tmp_path, capsys, monkeypatch, embeddings,
                                                                    what, patch):
    out = tmp_path / "out"
    argv = ["ood", embeddings, embeddings, "--n-frequencies", 16, "--no-progress", "--output", out / "out.json",
            "--scores-out", out / "scores.npy", "--plot-dir", out / "plots"]
    monkeypatch.setattr(*patch, disk_full(getattr(*patch)))
    code, stdout, err = run_cli(capsys, *argv)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert what in err and "No space left on device" in err and "nothing was written there" in err, err
    assert "Traceback" not in err
    assert what not in names(out) and not [n for n in names(out) if "partial" in n], names(out)
    monkeypatch.undo()
    code, stdout, err = run_cli(capsys, *argv)  # the same command with space: every file, whole
    assert code == 0, err
    assert names(out) == ["ood_spectrum.png", "out.json", "scores.npy"]
    assert json.loads((out / "out.json").read_text())["scores_out"]["test"] == str(out / "scores.npy")
    assert np.load(out / "scores.npy").shape == (120,)


def test_a_gallery_on_a_full_disk_is_not_left_half_written(tmp_path, capsys, monkeypatch, embeddings):
    from PIL import Image

    listing = tmp_path / "images.txt"
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    listing.write_text("a.png\n" * 120)
    monkeypatch.setattr(torchvision.utils, "save_image", disk_full(torchvision.utils.save_image))
    code, _, err = run_cli(capsys, "ood", embeddings, embeddings, "--n-frequencies", 16, "--no-progress",
                           "--plot-dir", tmp_path / "plots", "--images", listing, "--top-k", 3)
    assert code == 2 and "ood_most_ood.png" in err and "`--plot-dir`" in err, err
    assert names(tmp_path / "plots") == ["ood_spectrum.png"]  # the one written before, whole


@pytest.mark.parametrize("flag, place", [("--output", "file/out.json"), ("--plot-dir", "file"),
                                         ("--scores-out", "file/s.npy")])
def test_the_cli_refuses_an_unwritable_output_before_any_work(tmp_path, capsys, embeddings, flag, place):
    (tmp_path / "file").write_text("")
    code, stdout, err = run_cli(capsys, "ood", embeddings, embeddings, "--no-progress", flag, tmp_path / place)
    assert code == 2 and stdout == "" and err.count("\n") == 1 and f"`{flag}`" in err, err
    assert err.startswith("lightning-spectral ood: error:"), err


# ---------------------------------------------------------------------------------------------------------------
# save_features and the recipes' summary.json
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "suffix, patch",
    [(".npy", (np, "save")), (".pt", (torch, "save")), (".safetensors", ("safetensors.torch.save_file", None))],
)
def test_save_features_on_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch, suffix, patch):
    path = tmp_path / f"ref{suffix}"
    save_features(path, torch.eye(3), index=torch.tensor([4, 5, 6]))
    before = names(tmp_path)
    if patch[1] is None:
        import safetensors.torch

        monkeypatch.setattr(safetensors.torch, "save_file", disk_full(safetensors.torch.save_file))
    else:
        monkeypatch.setattr(*patch, disk_full(getattr(*patch)))
    with pytest.raises(WriteError, match=f"ref{suffix}'.*No space left on device"):
        save_features(path, torch.zeros(5, 3))
    assert names(tmp_path) == before  # no partial file; the old features and their index untouched
    table = PrecomputedFeatures(path)
    assert len(table) == 3 and table[[6]].tolist() == [[0.0, 0.0, 1.0]]


def test_a_recipe_summary_on_a_full_disk_names_the_file(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "recipes"))
    from align_clip import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WriteError, match="`--summary_json`: cannot create"):  # refused before training
        main(["--config", str(ROOT / "recipes" / "configs" / "tiny.yaml"), f"--summary_json={blocker / 's.json'}"])


# ---------------------------------------------------------------------------------------------------------------
# what is not a regular file: devices and FIFOs are written through, links followed, disks and sockets refused
# ---------------------------------------------------------------------------------------------------------------


def is_char_device(path):
    import stat

    return stat.S_ISCHR(os.stat(path).st_mode)


def test_dev_null_is_written_through_and_stays_a_device():
    with written("/dev/null", "--output") as temporary:
        temporary.write_text("{}")
    assert is_char_device("/dev/null") and not os.path.islink("/dev/null")
    assert not [p for p in Path("/dev").iterdir() if p.name.startswith(".null.")]  # no temporary file in /dev
    assert check_writable("/dev/null", "--output") == Path("/dev/null")


def test_dev_full_fails_by_name_and_stays_a_device():
    with pytest.raises(WriteError) as caught:
        with written("/dev/full", "--output") as temporary:
            temporary.write_text("{}")
    message = str(caught.value)
    assert message.startswith("`--output`: could not write to '/dev/full', a device (No space left on device)")
    assert "regular file" in message and "\n" not in message
    assert is_char_device("/dev/full")


def test_the_cli_writes_through_dev_null_and_fails_on_dev_full(capsys, embeddings):
    argv = ["evaluate", embeddings, "--sigma", "1", "--n-frequencies", 16, "--no-progress", "--output"]
    code, stdout, err = run_cli(capsys, *argv, "/dev/null")
    assert code == 0 and stdout == "", err
    assert is_char_device("/dev/null")
    code, stdout, err = run_cli(capsys, *argv, "/dev/full")
    assert code == 2 and err.count("\n") == 1 and "`--output`" in err and "'/dev/full'" in err, err
    assert "No space left on device" in err and "Traceback" not in err
    assert is_char_device("/dev/full")


def test_a_fifo_with_a_reader_gets_the_bytes_and_stays_a_fifo(tmp_path):
    import stat

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader's end, open first (a few bytes fit its buffer)
    try:
        with written(fifo, "--output") as temporary:
            temporary.write_text('{"a": 1}')
        assert os.read(reader, 1024) == b'{"a": 1}'
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe.json"]


def test_a_fifo_without_a_reader_is_refused_at_once(tmp_path):
    import stat

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(WriteError, match=r"`--output`: .*pipe.json' is a FIFO that no process is reading; start "):
        with written(fifo, "--output") as temporary:
            temporary.write_text("{}")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_writes_its_target_and_stays_a_link(tmp_path):
    target = tmp_path / "data" / "real.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with written(link, "--output") as temporary:
        temporary.write_text("new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and names(tmp_path / "data") == ["real.json"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "data" / "later.json")
    assert check_writable(dangling, "--output") == dangling
    with written(dangling, "--output") as temporary:
        temporary.write_text("created")
    assert dangling.is_symlink() and (tmp_path / "data" / "later.json").read_text() == "created"


def test_the_cli_output_through_a_symlink_writes_the_target(tmp_path, capsys, embeddings):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    code, _, err = run_cli(capsys, "evaluate", embeddings, "--sigma", "1", "--n-frequencies", 16, "--no-progress",
                           "--output", link)
    assert code == 0, err
    assert link.is_symlink() and "vendi" in json.loads(target.read_text())


def test_a_socket_or_a_block_device_is_refused_by_name(tmp_path):
    import socket
    import stat

    where = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(where))
    try:
        with pytest.raises(WriteError, match=r"`--output`: .*sock' is a socket, not a file; .*regular file"):
            check_writable(where, "--output")
        with pytest.raises(WriteError, match="is a socket"):
            with written(where, "--output") as temporary:
                temporary.write_text("{}")
    finally:
        server.close()
    disk = tmp_path / "disk"
    try:
        os.mknod(disk, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    except OSError:
        pytest.skip("cannot create a block device node here")
    with pytest.raises(WriteError, match=r"`--output`: .*disk' is a block device \(a disk or a partition\)"):
        with written(disk, "--output") as temporary:
            temporary.write_text("{}")
    assert stat.S_ISBLK(os.stat(disk).st_mode)


def test_a_loop_of_links_is_refused_and_left_as_it_was(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.symlink_to(second)
    second.symlink_to(first)
    with pytest.raises(WriteError, match="symbolic link that loops"):
        check_writable(first, "--output")  # before any work
    with pytest.raises(WriteError, match=r"`--output`: .*a.json' is a symbolic link that loops"):
        with written(first, "--output") as temporary:
            temporary.write_text("{}")
    assert first.is_symlink() and second.is_symlink() and os.readlink(first) == str(second)


def test_a_script_entry_point_turns_a_refused_path_into_one_line_and_exit_code_2(capsys):
    from lightning_spectral.io import CheckpointError, run_script

    def refused_write():
        raise WriteError("`--summary_json`: /nowhere/summary.json cannot be written; give a writable path")

    def refused_checkpoint():
        raise CheckpointError("`--ckpt_path`: none.ckpt does not exist; give an existing checkpoint")

    for run, reason in ((refused_write, "`--summary_json`"), (refused_checkpoint, "`--ckpt_path`")):
        with pytest.raises(SystemExit) as caught:
            run_script(run, "/some/where/recipe.py")
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"recipe.py: error: {reason}") and err.count("\n") == 1
    with pytest.raises(ZeroDivisionError):  # any other error is a bug, shown with its traceback
        run_script(lambda: 1 / 0, "recipe.py")
    run_script(lambda: None, "recipe.py")  # a run that succeeds returns
