"""`kiln plot`: the PNG it writes is decoded here with zlib and struct (no imaging library) and
checked for facts a wrong picture would fail: its size, where each series' colour lies and which way
it runs, the newest checkpoint's state used when the run has none, and errors naming the file."""
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kiln_cli import assert_cli_error, kiln_path, run_kiln  # noqa: E402

# include/kiln/plot.h's kPlotPalette: loss, eval_loss, learning_rate, grad_norm, first eval metric.
LOSS, EVAL_LOSS, LR, GRAD_NORM, METRIC = (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)


@pytest.fixture(scope="module", autouse=True)
def kiln_built():
    assert kiln_path().exists(), f"{kiln_path()} does not exist: build kiln_cli or set KILN_BUILD_DIR"


def read_png(path):
    """(width, height, pixels as an int array [height, width, 3]) of an 8-bit RGB PNG, checking
    the signature, every chunk's CRC and each scanline's filter type, and undoing the filters."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header, types = 8, b"", None, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + body), f"bad CRC in chunk {kind}"
        types.append(kind)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    assert types[0] == b"IHDR" and types[-1] == b"IEND", types
    width, height, depth, colour, compression, filter_method, interlace = header
    assert (depth, colour, compression, filter_method, interlace) == (8, 2, 0, 0, 0)
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8)
    stride = width * 3
    assert raw.size == height * (stride + 1)
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.int64)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        f, line = rows[y, 0], rows[y, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(width, 3), axis=0).reshape(-1) % 256
        elif f == 2:
            cur = (line + prev) % 256
        elif f in (3, 4):
            cur = np.zeros(stride, dtype=np.int64)
            for i in range(stride):
                a = cur[i - 3] if i >= 3 else 0
                b = prev[i]
                c = prev[i - 3] if i >= 3 else 0
                if f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (line[i] + pred) % 256
        else:
            raise AssertionError(f"row {y} has filter type {f}")
        out[y] = cur
        prev = cur
    return width, height, out.reshape(height, width, 3)


def mask(pixels, colour):
    return np.all(pixels == np.array(colour), axis=2)


def binned_rows(m, bins=10):
    """The median row of the colour in each of `bins` equal column ranges that hold it."""
    ys, xs = np.nonzero(m)
    edges = np.linspace(xs.min(), xs.max() + 1, bins + 1)
    return [float(np.median(ys[(xs >= lo) & (xs < hi)])) for lo, hi in zip(edges[:-1], edges[1:])
            if np.any((xs >= lo) & (xs < hi))]


def line_fit(m):
    """(slope, intercept, inlier fraction, column medians of the inliers sorted by column) of a
    straight line through each column's median row. The first estimate takes the slope between the
    medians of the outer thirds and is robust to the legend's short swatch of the same colour; the
    line is then refitted by least squares to the columns within 5 px of it."""
    cols = {}
    ys, xs = np.nonzero(m)
    for x in np.unique(xs):
        cols[int(x)] = float(np.median(ys[xs == x]))
    x = np.array(sorted(cols), dtype=float)
    y = np.array([cols[int(c)] for c in x])
    third = len(x) // 3
    slope = (np.median(y[-third:]) - np.median(y[:third])) / (np.median(x[-third:]) - np.median(x[:third]))
    icept = np.median(y - slope * x)
    inlier = np.abs(y - (slope * x + icept)) <= 5
    slope, icept = np.polyfit(x[inlier], y[inlier], 1)
    return slope, icept, inlier.mean(), y[inlier]


def known_history():
    """Loss falling linearly 2.0 -> 0.5 over steps 5..100, learning rate decaying, evaluations every 20
    steps with eval_loss falling and eval_accuracy rising, and the run summary at the end."""
    history = []
    for step in range(5, 101, 5):
        history.append({"loss": 2.0 - 1.5 * (step - 5) / 95, "grad_norm": 1.0, "learning_rate": 5e-5 * (1 - step / 100),
                        "epoch": step / 50, "step": step})
        if step % 20 == 0:
            history.append({"eval_loss": 2.2 - 1.5 * step / 100, "eval_accuracy": 0.5 + 0.4 * step / 100,
                            "eval_runtime": 0.5, "eval_samples_per_second": 800.0, "epoch": step / 50, "step": step})
    history.append({"train_loss": 1.2, "train_runtime": 3.5, "total_flos": 0, "epoch": 2.0, "step": 100})
    return history


def write_state(folder, history):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 100, "log_history": history}))


def test_plot_draws_each_series_where_and_how_it_runs(tmp_path):
    run = tmp_path / "run"
    write_state(run, known_history())
    proc = run_kiln("plot", run)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {run / 'training_curves.png'}"
    width, height, px = read_png(run / "training_curves.png")
    assert (width, height) == (1200, 800)
    # Not blank: many colours (anti-aliased edges, text) and most pixels not the background.
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 50

    # Four panels in a 2x2 grid: loss top left, learning rate top right, grad norm bottom left,
    # eval_accuracy bottom right.
    loss = mask(px, LOSS)
    ys, xs = np.nonzero(loss)
    assert loss.sum() > 500 and ys.max() < height / 2 and xs.max() < width / 2
    # A straight falling line: rows grow downwards as the loss falls, every column but the legend's
    # swatch within 1.5 px of the fitted line, and the curve never rises by more than 1.5 px.
    slope, icept, inliers, rows = line_fit(loss)
    assert 0.2 < slope < 0.8 and inliers > 0.9, (slope, inliers)
    assert np.all(np.diff(rows) >= -1.5), rows
    ys, xs = np.nonzero(loss)
    off = np.abs(ys - (slope * xs + icept)) > 2.5  # pixel centres vs line: the 2.5 px-wide stroke
    assert off.mean() < 0.1, off.mean()
    ys, xs = np.nonzero(mask(px, EVAL_LOSS))
    assert len(ys) > 100 and ys.max() < height / 2 and xs.max() < width / 2
    lr_rows = binned_rows(mask(px, LR))
    ys, xs = np.nonzero(mask(px, LR))
    assert ys.max() < height / 2 and xs.min() > width / 2
    assert all(b > a for a, b in zip(lr_rows, lr_rows[1:])), lr_rows
    ys, xs = np.nonzero(mask(px, GRAD_NORM))  # constant: one flat line
    assert ys.min() > height / 2 and xs.max() < width / 2 and ys.max() - ys.min() <= 3
    accuracy = mask(px, METRIC)
    ys, xs = np.nonzero(accuracy)
    assert ys.min() > height / 2 and xs.min() > width / 2
    acc_rows = binned_rows(accuracy, bins=5)
    assert all(b < a for a, b in zip(acc_rows, acc_rows[1:])), acc_rows  # rising: rows shrink


def test_plot_output_size_and_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    write_state(run / "checkpoint-20", known_history())
    (run / "checkpoint-9").mkdir()
    (run / "checkpoint-9" / "trainer_state.json").write_text("{ not json")  # older: must not be read
    out = tmp_path / "curves.png"
    proc = run_kiln("plot", run, "--output", out, "--width", 600, "--height", 400, "--title", "lr 5e-5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {out}"
    width, height, px = read_png(out)
    assert (width, height) == (600, 400)
    assert mask(px, LOSS).sum() > 100 and mask(px, METRIC).sum() > 20


def test_plot_skips_non_finite_values(tmp_path):
    history = [{"loss": float(v), "step": s} for s, v in zip(range(0, 110, 10), [1.0] * 11)]
    history[5]["loss"] = float("nan")  # Python's json writes NaN, which Kiln's reader rejects...
    run = tmp_path / "run"
    run.mkdir()
    text = json.dumps({"log_history": history}).replace("NaN", "null")  # ...so store it as JSON does
    (run / "trainer_state.json").write_text(text)
    proc = run_kiln("plot", run)
    assert proc.returncode == 0, proc.stderr
    _, _, px = read_png(run / "training_curves.png")
    cols = np.nonzero(mask(px, LOSS).any(axis=0))[0]
    c0, c1 = cols.min(), cols.max()
    gap = [c for c in range(int(c0 + (c1 - c0) * 0.43), int(c0 + (c1 - c0) * 0.57)) if c in set(cols)]
    assert not gap, f"the NaN at step 50 must leave a gap between steps 40 and 60: drawn at columns {gap}"


def test_plot_errors_name_the_file(tmp_path):
    missing = tmp_path / "nowhere"
    assert_cli_error(run_kiln("plot", missing), str(missing), "does not exist")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_cli_error(run_kiln("plot", empty), "no trainer_state.json", str(empty))
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "trainer_state.json").write_text('{"log_history": [')
    assert_cli_error(run_kiln("plot", corrupt), str(corrupt / "trainer_state.json"), "not valid JSON")
    nothing = tmp_path / "nothing"
    write_state(nothing, [{"train_loss": 1.0, "train_runtime": 2.0, "step": 10}])
    assert_cli_error(run_kiln("plot", nothing), str(nothing / "trainer_state.json"),
                     "log_history has no loss or eval metrics")
    write_state(tmp_path / "good", known_history())
    unwritable = tmp_path / "no_such_folder" / "x.png"
    assert_cli_error(run_kiln("plot", tmp_path / "good", "--output", unwritable), str(unwritable))
    assert_cli_error(run_kiln("plot", tmp_path / "good", "--width", 50), "50x800")


def test_plot_of_a_real_training_run(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1, 28, 28)).astype(np.float32)
    y = (x.reshape(256, -1)[:, :10].argmax(axis=1)).astype(np.int64)  # learnable labels
    np.savez(tmp_path / "data.npz", input=x, labels=y)
    out = tmp_path / "out"
    proc = run_kiln("train", "--model", "mlp", "--train-data", tmp_path / "data.npz", "--eval-data",
                    tmp_path / "data.npz", "--max_steps", "60", "--logging_steps", "5", "--eval_strategy", "steps",
                    "--eval_steps", "20", "--output_dir", out, "--disable_tqdm", "true", timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = run_kiln("plot", out)
    assert proc.returncode == 0, proc.stderr
    width, height, px = read_png(out / "training_curves.png")
    assert (width, height) == (1200, 800)
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    # Evaluations at steps 20, 40, 60, and kiln train's final one (step 60 again).
    assert sum("loss" in e for e in history) == 12 and sum("eval_loss" in e for e in history) == 4
    # The training loss falls on this data: its curve ends lower on the picture than it starts.
    rows = binned_rows(mask(px, LOSS), bins=4)
    assert rows[-1] > rows[0], rows
    assert mask(px, EVAL_LOSS).sum() > 50 and mask(px, METRIC).sum() > 50
