"""compare --model: a whole torch model, torch's convolutions against convsuite's; torchvision optional."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from convsuite import cli

torch = pytest.importorskip("torch")

from convsuite.bench import model_compare  # noqa: E402  (needs torch to be worth testing)
from convsuite.bench.model_compare import compare_model, load_model, speedup_over_torch  # noqa: E402


def _stand_in():
    """A small classifier from torch.nn (convolutions of several kinds), in place of a torchvision model."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8),  # depthwise, strided
        nn.Conv2d(8, 16, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    ).eval()


def test_without_torchvision_the_option_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision -> ImportError
    with pytest.raises(ValueError, match="--model needs torchvision"):
        load_model("resnet18")
    assert cli.main(["compare", "--model", "resnet18", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs torchvision" in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_model_is_timed_against_its_converted_copy_and_its_logits_agree():
    model = _stand_in()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(x)
    results, meta = compare_model(model, (2, 3, 16, 16), ["numpy", None], repeat=3)
    assert [r.contender for r in results] == ["torch", "convsuite (numpy)", "convsuite (auto)"]
    assert [r.backend for r in results] == [None, "numpy", "auto"]
    for r in results:
        assert 0 < r.low_s <= r.median_s <= r.high_s and r.repeats == 3 and r.first_call_s > 0
    assert results[0].max_rel_diff == 0.0
    assert all(r.max_rel_diff < 1e-5 for r in results[1:])  # float32 convolutions, the same model
    with torch.no_grad():  # the model itself was left as it was: its convolutions are still torch's
        assert torch.equal(model(x), expected)
    assert all(type(m).__module__.startswith("torch.nn") for m in model.modules())
    assert meta["model"] == "Sequential" and meta["input_shape"] == [2, 3, 16, 16] and meta["rounds"] == 3
    speed = speedup_over_torch(results)
    assert speed["torch"] == 1.0 and all(v > 0 for v in speed.values())


def test_logits_that_disagree_are_reported_as_they_are(monkeypatch):
    """The agreement is measured, not assumed: a convert that breaks a layer shows a large difference."""
    import convsuite.torch as cst

    real_convert = cst.convert

    def broken(model, backend=None, **kwargs):
        out = real_convert(model, backend=backend, **kwargs)
        with torch.no_grad():
            out[0].weight.mul_(2.0)
        return out

    monkeypatch.setattr(cst, "convert", broken)
    results, _ = compare_model(_stand_in(), (1, 3, 8, 8), ["numpy"], repeat=1)
    assert results[1].max_rel_diff > 1e-2


def test_cli_model_end_to_end_with_a_stand_in(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(model_compare, "load_model", lambda name: _stand_in())
    argv = ["compare", "--model", "tiny", "--x", "1,3,16,16", "--backends", "numpy", "--repeat", "2"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "convsuite (numpy)" in out and "torch" in out and "logits rel. diff" in out
    data = json.loads((tmp_path / "model.json").read_text())
    assert data["meta"]["model_name"] == "tiny" and [r["contender"] for r in data["results"]] == [
        "torch",
        "convsuite (numpy)",
    ]
    assert np.isfinite([r["median_s"] for r in data["results"]]).all()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--workload", "default"], "leave out --workload"),
        (["--w", "4,3,3,3"], "leave out --w"),
        (["--backends", "nope"], "unknown or unavailable backend: nope"),
        (["--scaling", "joblib"], "leave out --model"),
    ],
)
def test_cli_model_refuses_options_that_do_not_apply(extra, message, capsys, monkeypatch):
    monkeypatch.setattr(model_compare, "load_model", lambda name: pytest.fail("built before the options were checked"))
    assert cli.main(["compare", "--model", "tiny", *extra]) == 2
    assert message in capsys.readouterr().err


def test_load_model_asks_torchvision_for_no_weights_and_names_close_matches(monkeypatch):
    """Nothing is downloaded (weights=None), the model is in eval mode, a typo gets suggestions."""
    import types

    asked = {}

    def get_model(name, **kwargs):
        asked.update(name=name, **kwargs)
        return _stand_in().train()

    models = types.SimpleNamespace(list_models=lambda module=None: ["resnet18", "resnet50", "mobilenet_v2"])
    models.get_model = get_model
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(models=models))
    model = load_model("resnet18")
    assert asked == {"name": "resnet18", "weights": None} and not model.training
    with pytest.raises(ValueError, match=r"got 'resnet19'; did you mean resnet18 or resnet50\?"):
        load_model("resnet19")
