"""The atomic writers: a finished write has exactly the new bytes, a failed one (disk full, Ctrl-C, even
wrapped by torch.save) leaves the old file and no temporary file; stale temp files are cleaned; output
checks refuse inputs, folders and existing files before any work."""

from __future__ import annotations

import errno
import io
import os
import re
import time
from pathlib import Path
from typing import IO

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from roseood.csvfiles import spreadsheet_safe, write_csv
from roseood.errors import RoseError
from roseood.serialization import (
    STALE_TMP_S,
    atomic_save,
    atomic_write,
    check_output,
    printable,
    save_npy,
    write_bytes,
    write_text,
)

FIXTURE_OK = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def files(folder: Path) -> list[str]:
    """Every file under ``folder`` (hidden ones included)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@FIXTURE_OK
@given(old=st.binary(max_size=2000), new=st.binary(max_size=2000), cut=st.integers(0, 2000))
def test_write_is_all_or_nothing(tmp_path: Path, old: bytes, new: bytes, cut: int) -> None:
    target = tmp_path / "out.bin"
    write_bytes(target, old)

    def disk_full(f: IO[bytes]) -> None:
        f.write(new[:cut])
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RoseError, match="No space left"):
        atomic_write(target, disk_full)
    assert target.read_bytes() == old and leftovers(tmp_path) == []
    write_bytes(target, new)
    assert target.read_bytes() == new and leftovers(tmp_path) == []


@FIXTURE_OK
@given(
    array=hnp.arrays(hnp.floating_dtypes() | hnp.integer_dtypes(), hnp.array_shapes(min_dims=0, max_dims=3))
)
def test_npy_round_trip(tmp_path: Path, array: np.ndarray) -> None:
    save_npy(tmp_path / "a.npy", array)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy", allow_pickle=False), array)


@FIXTURE_OK
@given(rows=st.lists(st.tuples(st.text(max_size=10), st.floats(allow_nan=False)), max_size=20))
def test_csv_round_trip(tmp_path: Path, rows: list[tuple[str, float]]) -> None:
    import csv

    write_csv(tmp_path / "s.csv", ["file", "score"], rows)
    with (tmp_path / "s.csv").open(newline="") as f:
        back = list(csv.reader(f))
    assert back == [["file", "score"], *([spreadsheet_safe(name), str(x)] for name, x in rows)]


@FIXTURE_OK
@given(raw=st.binary(max_size=30), text=st.text(max_size=10))
def test_names_of_any_bytes_are_written_as_utf8_with_their_bytes_escaped(
    tmp_path: Path, raw: bytes, text: str
) -> None:
    name = raw.decode("utf-8", "surrogateescape")  # as Python hands over a file name's bytes
    escaped = raw.decode("utf-8", "backslashreplace")  # every byte that is not UTF-8 as \xNN
    assert printable(name) == escaped and printable(text) == text and printable("a\ud800") == "a\\ud800"
    write_csv(tmp_path / "s.csv", ["file"], [[name], [text]])
    expected = csv_text(["file"], [[spreadsheet_safe(escaped)], [spreadsheet_safe(text)]])
    assert (tmp_path / "s.csv").read_bytes().decode("utf-8") == expected
    write_text(tmp_path / "r.md", f"{name}|{text}")
    assert (tmp_path / "r.md").read_bytes().decode("utf-8") == f"{escaped}|{text}"


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    import csv

    out = io.StringIO(newline="")
    csv.writer(out).writerows([header, *rows])
    return out.getvalue()


class InterruptingFile(io.RawIOBase):
    """A file whose third write is hit by Ctrl-C (torch.save then raises a RuntimeError on close)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.calls = f, 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.calls += 1
        if self.calls == 3:
            raise KeyboardInterrupt
        return self.f.write(b)


def test_ctrl_c_inside_torch_save_stays_an_interrupt(tmp_path: Path) -> None:
    target = tmp_path / "m.pt"
    atomic_save({"old": torch.ones(3)}, target)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, lambda f: torch.save({"x": torch.zeros(1000)}, InterruptingFile(f)))
    assert torch.equal(torch.load(target, weights_only=True)["old"], torch.ones(3))
    assert leftovers(tmp_path) == []


def test_ctrl_c_during_a_cli_save_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from roseood.cli import main

    real = torch.save  # what roseood.serialization.atomic_save calls
    monkeypatch.setattr(torch, "save", lambda obj, f: real(obj, InterruptingFile(f)))
    monkeypatch.setenv("ROSEOOD_DATA", str(tmp_path))
    np.savez(tmp_path / "fashion_mnist_train.npz", images=np.zeros((8, 28, 28), np.uint8))
    args = ["train", "vae", "--ngf", "2", "--nz", "2", "--epochs", "1", "--out", str(tmp_path / "m.pt")]
    assert main(args) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"
    assert not (tmp_path / "m.pt").exists() and leftovers(tmp_path) == []


def test_stale_temp_files_are_cleaned_by_the_next_write(tmp_path: Path) -> None:
    stale, fresh = tmp_path / ".out.bin.abc.tmp", tmp_path / ".other.pt.def.tmp"
    stale.write_bytes(b"killed save")
    fresh.write_bytes(b"save in progress")
    old = time.time() - STALE_TMP_S - 60
    os.utime(stale, (old, old))
    write_bytes(tmp_path / "out.bin", b"x")
    assert not stale.exists() and fresh.exists()


def test_output_checks(tmp_path: Path) -> None:
    (tmp_path / "in.npz").write_bytes(b"data")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "in.npz", tmp_path / "link.npz")
    with pytest.raises(RoseError, match="also an input"):
        check_output(tmp_path / "link.npz", inputs=[tmp_path / "in.npz"], overwrite=True)
    with pytest.raises(RoseError, match="is a folder"):
        check_output(tmp_path / "dir")
    with pytest.raises(RoseError, match="exists"):
        check_output(tmp_path / "in.npz")
    with pytest.raises(RoseError, match="is a file"):
        check_output(tmp_path / "in.npz", folder=True)
    assert check_output(tmp_path / "new" / "deeper" / "x.csv") == tmp_path / "new" / "deeper" / "x.csv"
    assert not (tmp_path / "new").exists()  # checking creates nothing
    assert check_output(tmp_path / "in.npz", overwrite=True) == tmp_path / "in.npz"


# -- outputs that are not regular files, standard output, concurrent writers (issue 30) ---------------


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_output_that_is_not_a_regular_file_is_refused_before_any_work(tmp_path: Path, kind: str) -> None:
    """A FIFO with no reader would block the write forever (issue 73), so a FIFO or a device in place of
    an output is refused in one line when checked, without opening it; the node stays."""
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    path = fifo if kind == "fifo" else Path("/dev/null")
    with pytest.raises(RoseError, match=r"^\S+ exists and is not a regular file \(a FIFO, a device or a"):
        check_output(path, overwrite=True)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_device_paths_a_caller_writes_are_written_in_place_and_their_errors_are_one_line() -> None:
    import stat

    write_text("/dev/null", "gone\n")
    with pytest.raises(RoseError, match=r"^cannot write /dev/full: No space left on device$"):
        write_text("/dev/full", "x" * 100_000)
    with pytest.raises(RoseError, match=r"^cannot write /dev/full: No space left on device$"):
        atomic_save({"x": torch.zeros(100_000)}, "/dev/full")  # torch.save's unexpected pos, unwrapped
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_socket_in_place_of_an_output_is_refused(tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        with pytest.raises(RoseError, match="is not a regular file"):
            check_output(tmp_path / "sock", overwrite=True)


def test_dash_is_standard_output_only_where_a_command_allows_it(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    with pytest.raises(RoseError, match=r"cannot be standard output \(-\)"):
        check_output("-")
    write_csv(check_output("-", stdout=True), ["a"], [[1]])
    assert capsysbinary.readouterr().out == b"a\r\n1\r\n"


def test_an_output_written_by_another_process_meanwhile_is_not_replaced(tmp_path: Path) -> None:
    out = check_output(tmp_path / "x.pt")
    (tmp_path / "x.pt").write_text("the other process's result")  # after our check, before our write
    with pytest.raises(RoseError, match="written by another process while this one ran"):
        write_text(out, "ours")
    assert (tmp_path / "x.pt").read_text() == "the other process's result"
    write_text(check_output(tmp_path / "y.pt"), "1")
    write_text(tmp_path / "y.pt", "2")  # the same process may write its own output again (epochs)
    assert (tmp_path / "y.pt").read_text() == "2"


WRITER = """
import sys, time
from pathlib import Path
from roseood.errors import RoseError
from roseood.serialization import check_output, write_text
out = check_output(sys.argv[1], overwrite=True)
Path(sys.argv[2]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
try:
    write_text(out, sys.argv[2])
except RoseError as exc:
    print(exc)
    sys.exit(2)
"""


def test_two_concurrent_writers_of_one_output_cannot_both_succeed(tmp_path: Path) -> None:
    import subprocess
    import sys

    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path / "x.csv"), str(r), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    deadline = time.time() + 60
    while not all(r.exists() for r in ready) and time.time() < deadline:
        time.sleep(0.05)
    go.touch()
    codes = sorted(p.wait(timeout=60) for p in procs)
    assert codes == [0, 2]
    assert (tmp_path / "x.csv").read_text() in {str(r) for r in ready}


# -- a full disk during a save: one line naming the file and the cause, the old file kept (issue 34) ----


class FullDisk:
    """A file on a disk with ``room`` bytes left: the write that passes them fails with ENOSPC, as the
    kernel's would (torch.save then raises its own ``RuntimeError ... unexpected pos`` over it)."""

    def __init__(self, f: IO[bytes], room: int, code: int = errno.ENOSPC) -> None:
        self.f, self.room, self.code = f, room, code

    def write(self, b: bytes) -> int:
        if len(b) > self.room:
            raise OSError(self.code, os.strerror(self.code))
        self.room -= len(b)
        return self.f.write(b)

    def __getattr__(self, name: str) -> object:
        return getattr(self.f, name)

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


def test_torch_saves_unexpected_pos_is_reported_as_the_os_error_under_it(tmp_path: Path) -> None:
    target = tmp_path / "m.pt"
    atomic_save({"old": torch.ones(3)}, target)
    with pytest.raises(RuntimeError, match="unexpected pos") as raw:  # what torch.save itself raises
        torch.save({"x": torch.zeros(1000)}, FullDisk(io.BytesIO(), 100))  # type: ignore[arg-type]
    assert isinstance(raw.value.__context__, OSError)
    for room, code in ((0, errno.ENOSPC), (100, errno.ENOSPC), (3000, errno.EDQUOT), (100, errno.EIO)):
        with pytest.raises(RoseError, match=rf"^cannot write {target}: {os.strerror(code)}$"):
            atomic_write(
                target, lambda f, r=room, c=code: torch.save({"x": torch.zeros(1000)}, FullDisk(f, r, c))
            )
        assert torch.equal(torch.load(target, weights_only=True)["old"], torch.ones(3))
        assert leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def disk_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model, a detector fitted with it, and Fashion-MNIST stand-ins to fit and evaluate on."""
    from roseood.models import VAE, save_model

    root = tmp_path_factory.mktemp("disk")
    images = np.random.default_rng(0).integers(0, 256, (24, 28, 28), dtype=np.uint8)
    for name in ("fashion_mnist_train", "fashion_mnist_test", "mnist_test"):
        np.savez(root / f"{name}.npz", images=images)
    torch.manual_seed(0)
    save_model(VAE(ngf=2, nz=2).eval(), root / "model.pt")
    return root


FIT = "fit --model model.pt --method nll --fit-samples 8 --stats-samples 4 -q"
EVALUATE = "evaluate --model model.pt --ood mnist --methods nll --fit-samples 8 --stats-samples 4"
TRAIN = "train vae --ngf 2 --nz 2 --epochs 1 -q"
DISK_FULL = {
    "fit": f"{FIT} --out new.pt",
    "fit --overwrite": f"{FIT} --out det.pt --overwrite",
    "evaluate --cache": f"{EVALUATE} --test-samples 4 --bootstrap 0 --cache cache -q",
    "train": f"{TRAIN} --out trained.pt",
    "train --overwrite": f"{TRAIN} --out det.pt --overwrite",
}


@pytest.mark.parametrize("room", [0, 200])
@pytest.mark.parametrize("command", list(DISK_FULL))
def test_a_full_disk_during_a_cli_save_is_one_line_and_keeps_the_old_file(
    command: str, room: int, disk_workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from roseood import serialization
    from roseood.cli import main

    monkeypatch.chdir(disk_workdir)
    monkeypatch.setenv("ROSEOOD_DATA", str(disk_workdir))
    old = b"an earlier detector, to be kept"
    (disk_workdir / "det.pt").write_bytes(old)
    before = files(disk_workdir)
    real = os.fdopen
    monkeypatch.setattr(serialization.os, "fdopen", lambda fd, mode: FullDisk(real(fd, mode), room))
    assert main(DISK_FULL[command].split()) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    written = {"fit": "new.pt", "train": "trained.pt", "evaluate --cache": "cache/"}.get(command, "det.pt")
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n"), err
    full = rf"error: cannot write \S*{re.escape(written)}\S*: No space left on device"
    assert re.fullmatch(full, errors[0])
    assert (disk_workdir / "det.pt").read_bytes() == old
    assert files(disk_workdir) == before  # nothing new, not even a temporary file


def test_csv_cells_a_spreadsheet_would_run_as_formulas_get_a_quote(tmp_path: Path) -> None:
    """OWASP's CSV-injection rule on file names: a leading =, +, -, @, tab or CR is neutralised by a
    leading ', while numbers (negative scores) and ordinary names stay as they are."""
    import csv

    names = ["=cmd|' /C calc'!A0.png", "+1.png", "-x.png", "@SUM(A1).png", "\tt.png", "ok.png", "a=b.png"]
    out = write_csv(tmp_path / "s.csv", ["file", "score"], [[n, "-0.5"] for n in names])
    rows = list(csv.reader(out.open(newline="")))[1:]
    assert [r[0] for r in rows] == ["'" + n for n in names[:5]] + names[5:]
    assert {r[1] for r in rows} == {"-0.5"}
