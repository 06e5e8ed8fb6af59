"""The Trainer's progress display, as a user sees it: a tqdm-style bar redrawn in place on a terminal
(run under a pseudo-terminal with util-linux's `script` and read back), plain lines when the output
is not a terminal, and only the logs with disable_tqdm (PrinterCallback)."""
import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from kiln_cli import kiln_path, run_kiln  # noqa: E402

# tqdm's layout: "{percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}it/s, loss=...]"
BAR = re.compile(r"\s*(\d+)%\|([█▏▎▍▌▋▊▉ ]+)\| (\d+)/(\d+) \[(\d\d:\d\d)<(\d\d:\d\d|\?), "
                 r"(?:([0-9.]+)it/s|\?it/s)(?:, loss=([0-9.]+))?\]")
LOG = re.compile(r"^\{'loss': .*\}$")


def test_bar_on_a_terminal(tmp_path):
    if shutil.which("script") is None:
        pytest.skip("util-linux's script is not installed")
    cmd = [str(kiln_path()), "train", "--model", "mlp", "--max_steps", "400", "--logging_steps", "100",
           "--save_strategy", "no", "--output_dir", str(tmp_path / "out")]
    # script gives the command a pseudo-terminal for stdin/stdout/stderr and copies what it wrote.
    proc = subprocess.run(["script", "-qefc", " ".join(map(shlex.quote, cmd)), "/dev/null"],
                          capture_output=True, timeout=600, env={"COLUMNS": "100", "TERM": "xterm",
                                                                  "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-2000:]
    text = proc.stdout.decode("utf-8")
    # Redraws start with a carriage return and end by clearing the rest of the line.
    frames = [f for f in re.split(r"[\r\n]", text.replace("\x1b[K", "")) if f.strip()]
    bars = [BAR.fullmatch(f) for f in frames]
    # The training bar (total 400), then the evaluation's (1250 batches of the test set).
    bars = [b for b in bars if b and b.group(4) == "400"]
    assert len(bars) >= 3, text[-2000:]
    last = bars[-1]
    assert last.group(1) == "100" and last.group(3) == "400", last.group(0)
    assert set(last.group(2)) == {"█"}  # a full bar
    assert last.group(8) is not None and float(last.group(8)) > 0  # the current loss
    counts = [int(b.group(3)) for b in bars]
    assert counts == sorted(counts) and counts[0] == 0
    for b in bars:  # the bar's fill follows the percentage, in eighths of a cell
        pct, body = int(b.group(1)), b.group(2)
        eighths = 8 * body.count("█") + sum(" ▏▎▍▌▋▊▉".index(c) for c in body if c in "▏▎▍▌▋▊▉")
        assert abs(eighths / (8 * len(body)) * 100 - pct) <= 100 / len(body) + 1, b.group(0)
        assert int(b.group(3)) * 100 // 400 == pct
    # The logs appear on their own lines between redraws (tqdm.write), as Python prints a dict.
    logs = [f for f in frames if LOG.match(f)]
    assert len(logs) == 4, frames[-20:]
    # linear decay from 1e-3 over 400 steps, at step 100
    assert ast.literal_eval(logs[0])["learning_rate"] == pytest.approx(7.5e-4)


def test_plain_lines_when_not_a_terminal(tmp_path):
    proc = run_kiln("train", "--model", "mlp", "--max_steps", "200", "--logging_steps", "100",
                    "--save_strategy", "no", "--output_dir", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("step ")]
    assert [int(re.match(r"step (\d+)/200", line).group(1)) for line in lines] == list(range(10, 201, 10))
    assert "\r" not in proc.stderr and "█" not in proc.stderr
    assert re.fullmatch(r"step 200/200 \(100%\) loss [0-9.]+, [0-9.]+ it/s, elapsed \d\d:\d\d, remaining 00:00",
                        lines[-1]), lines[-1]
    assert len([line for line in proc.stdout.splitlines() if LOG.match(line)]) == 2


def test_disable_tqdm_prints_only_logs(tmp_path):
    proc = run_kiln("train", "--model", "mlp", "--max_steps", "200", "--logging_steps", "100",
                    "--save_strategy", "no", "--output_dir", tmp_path / "out", "--disable_tqdm", "true")
    assert proc.returncode == 0, proc.stderr
    assert "step " not in proc.stderr
    logs = [ast.literal_eval(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [sorted(d) for d in logs[:2]] == [sorted(["loss", "grad_norm", "learning_rate", "epoch"])] * 2
    assert "train_runtime" in logs[2] and "total_flos" not in logs[2]
