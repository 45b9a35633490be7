"""The ECE408 batch-10,000 inference bench: its held-out batch and one small end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from convsuite.bench import ece408


def test_inference_batch_is_the_test_split_then_shifted_copies():
    rng = np.random.default_rng(0)
    x = rng.random((5, 1, 9, 9)).astype(np.float32)
    y = np.arange(5)
    xb, yb = ece408.inference_batch(x, y, 23, shift=2, seed=1)
    assert xb.shape == (23, 1, 9, 9) and yb.shape == (23,)
    np.testing.assert_array_equal(xb[:5], x)  # the split itself, unshifted
    np.testing.assert_array_equal(yb, np.arange(23) % 5)
    for i in range(5, 23):  # every later image is its source moved by at most 2 pixels, zero filled
        src = x[i % 5]
        assert any(np.array_equal(xb[i], ece408._shifted(src, dy, dx)) for dy in range(-2, 3) for dx in range(-2, 3))
    shifted = ece408._shifted(x[0], 1, -2)
    np.testing.assert_array_equal(shifted[:, 1:, :7], x[0][:, :8, 2:])
    assert not shifted[:, 0, :].any() and not shifted[:, :, 7:].any()
    with pytest.raises(ValueError, match="`images`"):
        ece408.inference_batch(x, y, 0)


def test_small_run_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "ece408.json"
    args = ["--device", "cpu", "--backend", "cython", "--images", "24", "--epochs", "1", "--repeat", "2"]
    assert ece408.main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Op Time per conv layer" in printed and "whole network" in printed
    r = json.loads(out.read_text())
    assert r["images"] == 24 and len(r["op_time_s"]) == 2 and len(r["layer_time_s"]) == 2
    assert r["prediction_agreement"] == 1.0  # same weights, same predictions as torch
    assert r["max_rel_logit_difference"] < 1e-4
    assert 0.0 <= r["accuracy"] <= 1.0 and r["accuracy"] == r["torch_accuracy"]
    assert all(t > 0 for t in r["op_time_s"]) and r["total_layer_time_s"] >= r["total_op_time_s"]


@pytest.mark.parametrize("flag", ["--images", "--epochs", "--repeat"])
def test_non_positive_counts_are_usage_errors(flag, capsys):
    with pytest.raises(SystemExit) as info:
        ece408.main(["--device", "cpu", flag, "0"])
    assert info.value.code == 2 and f"{flag} must be a positive integer; got 0" in capsys.readouterr().err
