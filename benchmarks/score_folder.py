"""`rose score` on a generated folder of many small images: peak memory, images/s, the share of time spent
decoding against scoring, and a run killed part-way (SIGKILL) resumed with --resume to the same CSV bytes.

    python benchmarks/score_folder.py --images 100000 --method rose-ekfac --out results/score_folder.json

The folder holds Fashion-MNIST and MNIST test images (28×28 grayscale PNG, each flipped or shifted at
random so no two files are alike) and three unreadable files; the detector is fitted once with `rose fit`
on the shipped Fashion-MNIST VAE. Peak memory is each `rose score` process's maximum resident set size,
measured at the full folder and at a tenth of it (`--subset`): bounded memory means the two are alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from roseood.data import load_images, open_images
from roseood.data.loading import read_readable

VAE = Path(__file__).resolve().parents[1] / "src" / "roseood" / "assets" / "fmnist_vae_ngf32.pt"
UNREADABLE = 3
LOG = Path("score_folder.log")  # set beside the images by main()


def make_folder(folder: Path, n: int, seed: int) -> float:
    """Write ``n`` PNG files (and ``UNREADABLE`` broken ones) into ``folder`` unless it is there; seconds."""
    done = folder / ".complete"
    if done.exists() and int(done.read_text()) == n:
        return 0.0
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    pool = np.concatenate([load_images(name, size=28).images[:, 0] for name in ("fashion_mnist", "mnist")])
    rng = np.random.default_rng(seed)
    for i in range(n):
        sub = folder / f"{i // 1000:03d}"  # a thousand files per subfolder
        sub.mkdir(exist_ok=True)
        img = pool[rng.integers(len(pool))]
        img = np.roll(img[:, ::-1] if rng.random() < 0.5 else img, rng.integers(-2, 3), axis=1)
        Image.fromarray(np.ascontiguousarray(img)).save(sub / f"{i:06d}.png")
    for k in range(UNREADABLE):  # spread through the folder: not an image, truncated, empty
        (folder / f"{(k + 1) * n // (UNREADABLE + 1) // 1000:03d}" / f"bad{k}.png").write_bytes(
            [b"not an image", (folder / "000" / "000000.png").read_bytes()[:50], b""][k]
        )
    done.write_text(str(n))
    return time.perf_counter() - t0


def rose(*args: str) -> list[str]:
    return [sys.executable, "-m", "roseood", *args]


def timed(cmd: list[str], interrupt_after: float | None = None) -> tuple[float, int, float]:
    """Run ``cmd`` (its messages into ``score_folder.log`` beside the images); (seconds, exit code, its
    peak resident memory in MiB). ``interrupt_after``: SIGKILL then, as when a job is killed (a Ctrl-C is
    ignored by a job a shell started in the background)."""
    t0 = time.perf_counter()
    with open(LOG, "a") as log:  # a file, not a pipe: a chatty child never blocks on a full pipe
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, text=True)
        if interrupt_after is not None:
            try:
                proc.wait(timeout=interrupt_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)  # a killed job: no chance to tidy up
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds, peak = time.perf_counter() - t0, usage.ru_maxrss / 1024
    print(f"{' '.join(cmd[3:])}: exit {proc.returncode}, {seconds:.1f} s, peak {peak:.0f} MiB", flush=True)
    if proc.returncode not in (0, -signal.SIGKILL):
        sys.exit(f"{' '.join(cmd)} failed (exit {proc.returncode}); see {LOG}")
    return seconds, proc.returncode, peak


def decode_only(folder: Path, chunk: int) -> tuple[float, float]:
    """Seconds to open the folder (headers) and to decode every image, chunk by chunk, without scoring."""
    t0 = time.perf_counter()
    stream = open_images(folder, channels=1, size=32, errors="skip")
    opened = time.perf_counter() - t0
    for lo in range(0, len(stream), chunk):  # a chunk with a broken file file by file, as rose score
        read_readable(stream, lo, min(lo + chunk, len(stream)), on_error=lambda i, message: None)
    return opened, time.perf_counter() - t0 - opened


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=100_000)
    p.add_argument("--method", default="rose-ekfac")
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--work", default="cache/score_folder", help="folder for the images, detector and CSVs")
    p.add_argument("--out", default="results/score_folder.json")
    p.add_argument("--interrupt-at", type=float, default=0.4, help="SIGKILL after this share of the full run")
    p.add_argument(
        "--whole",
        type=float,
        nargs=3,
        metavar=("SECONDS", "PEAK_MIB", "TENTH_PEAK_MIB"),
        help="reuse the uninterrupted runs measured before (WORK/whole.csv kept): only kill and resume",
    )
    args = p.parse_args()
    global LOG
    work = Path(args.work)
    LOG = work / "score_folder.log"
    folder = work / f"images_{args.images}"
    made = make_folder(folder, args.images, seed=0)
    det = work / f"{args.method}.pt"
    fit = ["fit", "--model", str(VAE), "--method", args.method, "--fit-samples", "2000"]
    if not det.exists():
        timed(rose(*fit, "--stats-samples", "500", "--out", str(det), "-q"))
    score = ["score", "--model", str(VAE), "--detector", str(det), "--data", str(folder)]
    score += ["--chunk", str(args.chunk), "-q", "--overwrite"]
    opened, decoding = decode_only(folder, args.chunk)
    print(f"decode only: headers {opened:.1f} s, decoding {decoding:.1f} s", flush=True)
    if args.whole is None:
        whole, _, peak = timed(rose(*score, "--out", str(work / "whole.csv")))
        tenth = ["--subset", str(args.images // 10), "--out", str(work / "tenth.csv")]
        _, _, peak_tenth = timed(rose(*score, *tenth))
    else:  # the two uninterrupted runs measured before (their whole.csv is kept)
        whole, peak, peak_tenth = args.whole
    cut = work / "cut.csv"
    for leftover in (cut, cut.with_name("cut.csv.partial"), cut.with_name("cut.csv.partial.json")):
        leftover.unlink(missing_ok=True)
    first, code, _ = timed(rose(*score, "--out", str(cut)), interrupt_after=args.interrupt_at * whole)
    kept = sum(1 for _ in cut.with_name("cut.csv.partial").open()) - 1
    second, code2, _ = timed(rose(*score, "--out", str(cut), "--resume"))
    same = cut.read_bytes() == (work / "whole.csv").read_bytes()
    result = {
        "settings": {
            "images": args.images,
            "unreadable files": UNREADABLE,
            "image": "28×28 grayscale PNG (Fashion-MNIST and MNIST test images, flipped/shifted)",
            "model": "shipped Fashion-MNIST VAE (ngf 32, nz 100)",
            "method": args.method,
            "fit": "rose fit, 2000 Fashion-MNIST training images, 500 held out",
            "chunk": args.chunk,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "folder written in s": round(made, 1),
        },
        "whole run s": round(whole, 1),
        "images/s": round(args.images / whole, 1),
        "peak MiB (all images)": round(peak),
        f"peak MiB ({args.images // 10} images)": round(peak_tenth),
        "open (headers) s": round(opened, 1),
        "decode s": round(decoding, 1),
        "decoding share": round((opened + decoding) / whole, 3),
        "killed": {"after s": round(first, 1), "exit": code, "rows kept": kept},
        "resumed": {"s": round(second, 1), "exit": code2, "csv identical": same},
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
