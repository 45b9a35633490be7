"""convsuite.torch: the autograd Function, the drop-in modules and convert(), against torch's own convolutions."""

from __future__ import annotations

import copy
import doctest
import io
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

# torch's own references warn that 'same' with an even kernel copies the input; the warning is theirs.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning")

import convsuite as cs  # noqa: E402
import convsuite._api  # noqa: E402
import convsuite.torch as cst  # noqa: E402

tnn = torch.nn
F = torch.nn.functional

#: Every CPU backend registered, by name; the tests of one that is unavailable skip with its reason.
CPU_BACKENDS = sorted(info.name for info in cs.list_backends() if info.device == "cpu")
#: Those whose kernels compute in float64 (gradcheck needs it).
F64_BACKENDS = [name for name in CPU_BACKENDS if "float64" in cs.get_backend(name).dtypes]


def _available(backend: str) -> str:
    info = {i.name: i for i in cs.list_backends()}[backend]
    if not info.available:
        pytest.skip(f"backend {backend!r} unavailable: {info.reason}")
    return backend


def test_numpy_and_numba_are_among_the_float64_backends():
    assert {"numpy", "numba"} <= set(F64_BACKENDS)


# Geometries: (x shape, w shape, keywords, bias). Small: gradcheck perturbs every element.
GEOMETRIES_2D = {
    "stride": ((2, 2, 5, 4), (3, 2, 3, 2), dict(stride=(2, 1)), True),
    "pad-int": ((2, 2, 4, 4), (3, 2, 3, 3), dict(padding=1), True),
    "pad-tuple": ((1, 2, 4, 5), (3, 2, 2, 3), dict(padding=(1, 2)), True),
    "same-dilated": ((1, 2, 5, 4), (3, 2, 3, 2), dict(padding="same", dilation=(1, 2)), True),
    "valid": ((2, 2, 5, 4), (2, 2, 3, 2), dict(padding="valid"), False),
    "dilation-stride": ((1, 2, 6, 5), (2, 2, 2, 2), dict(stride=2, dilation=(2, 1), padding=(2, 1)), True),
    "groups": ((2, 4, 4, 4), (6, 2, 3, 3), dict(groups=2, padding=1, stride=(1, 2)), True),
    "depthwise-no-bias": ((1, 3, 5, 4), (3, 1, 3, 3), dict(groups=3, padding=1), False),
}
GEOMETRIES_1D = {
    "stride": ((2, 2, 9), (3, 2, 3), dict(stride=2), True),
    "pad-int": ((2, 2, 6), (3, 2, 3), dict(padding=2), True),
    "pad-tuple": ((1, 3, 7), (2, 3, 4), dict(padding=(1,)), True),
    "same-dilated": ((2, 2, 8), (3, 2, 2), dict(padding="same", dilation=3), True),
    "valid": ((2, 2, 7), (2, 2, 3), dict(padding="valid"), False),
    "groups-dilation": ((2, 4, 9), (6, 2, 3), dict(groups=2, dilation=2, padding=1), True),
    "depthwise-no-bias": ((1, 3, 8), (3, 1, 3), dict(groups=3, stride=2, padding=1), False),
}
GEOMETRIES = {(2, name): g for name, g in GEOMETRIES_2D.items()} | {(1, name): g for name, g in GEOMETRIES_1D.items()}
FUNCTIONAL = {1: cst.conv1d, 2: cst.conv2d}
TORCH_FUNCTIONAL = {1: F.conv1d, 2: F.conv2d}


def _operands(key, dtype=torch.float64, seed=0):
    x_shape, w_shape, keywords, bias = GEOMETRIES[key]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, dtype=dtype, generator=gen).requires_grad_()
    w = torch.randn(w_shape, dtype=dtype, generator=gen).requires_grad_()
    b = torch.randn(w_shape[0], dtype=dtype, generator=gen).requires_grad_() if bias else None
    return x, w, b, keywords


@pytest.mark.parametrize("backend", F64_BACKENDS)
@pytest.mark.parametrize("key", sorted(GEOMETRIES), ids=lambda k: f"{k[0]}d-{k[1]}")
def test_gradcheck_float64(key, backend):
    _available(backend)
    x, w, b, keywords = _operands(key)
    conv = FUNCTIONAL[key[0]]
    inputs = (x, w) if b is None else (x, w, b)

    def run(x, w, b=None):
        return conv(x, w, b, backend=backend, **keywords)

    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)
    # gradcheck compares with finite differences of our own forward: the forward itself against torch's.
    torch.testing.assert_close(run(*inputs), TORCH_FUNCTIONAL[key[0]](*inputs, **keywords), rtol=1e-12, atol=1e-12)


def test_gradcheck_unbatched_input():
    x = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: cst.conv2d(x, w, padding="same", backend="numpy"), (x, w))
    assert cst.conv2d(x, w, backend="numpy").shape == F.conv2d(x, w).shape == (3, 3, 3)


def _pair(ndim, *args, **kwargs):
    """Ours and torch's module with the same parameters."""
    torch.manual_seed(0)
    theirs = (tnn.Conv1d if ndim == 1 else tnn.Conv2d)(*args, **kwargs)
    ours = (cst.Conv1d if ndim == 1 else cst.Conv2d)(*args, **kwargs, backend="numpy")
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


MODULE_CASES = {
    "2d": (2, (3, 4, 3), dict(stride=2, padding=1), (2, 3, 9, 8)),
    "2d-same-even-kernel": (2, (3, 4, (2, 4)), dict(padding="same", dilation=(2, 1)), (2, 3, 7, 6)),
    "2d-groups-no-bias": (2, (4, 6, 3), dict(groups=2, bias=False, padding="valid"), (2, 4, 6, 7)),
    "2d-reflect": (2, (3, 4, 3), dict(padding=(1, 2), padding_mode="reflect"), (2, 3, 6, 7)),
    "2d-replicate-same": (2, (3, 4, (3, 2)), dict(padding="same", padding_mode="replicate"), (2, 3, 6, 7)),
    "2d-circular-stride": (2, (3, 4, 3), dict(padding=1, stride=2, padding_mode="circular"), (2, 3, 7, 6)),
    "2d-unbatched": (2, (3, 4, 3), dict(padding=1), (3, 6, 5)),
    "1d": (1, (3, 5, 4), dict(stride=2, padding=2, dilation=2), (2, 3, 17)),
    "1d-circular-same": (1, (3, 5, 4), dict(padding="same", padding_mode="circular"), (2, 3, 11)),
    "1d-unbatched": (1, (3, 5, 3), dict(), (3, 10)),
}


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
def test_module_matches_torch_float32(case):
    ndim, args, kwargs, x_shape = MODULE_CASES[case]
    ours, theirs = _pair(ndim, *args, **kwargs)
    x = torch.randn(x_shape)
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    assert y_ours.dtype == torch.float32
    torch.testing.assert_close(y_ours, y_theirs, rtol=1e-4, atol=1e-5)
    grad_y = torch.randn_like(y_theirs)
    y_ours.backward(grad_y)
    y_theirs.backward(grad_y)
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=1e-4, atol=1e-5)
    for (name, p_ours), p_theirs in zip(ours.named_parameters(), theirs.parameters()):
        assert p_ours.grad.dtype == torch.float32, name
        torch.testing.assert_close(p_ours.grad, p_theirs.grad, rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_module_on_every_cpu_backend_matches_torch(backend):
    _available(backend)
    torch.manual_seed(1)
    theirs = tnn.Conv2d(4, 6, 3, stride=(1, 2), padding=1, groups=2)
    ours = cst.Conv2d(4, 6, 3, stride=(1, 2), padding=1, groups=2, backend=backend)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 4, 7, 8, requires_grad=True)
    y = ours(x)
    torch.testing.assert_close(y, theirs(x), rtol=1e-4, atol=1e-5)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    (gx_theirs,) = torch.autograd.grad(theirs(x).square().sum(), x)
    torch.testing.assert_close(gx, gx_theirs, rtol=1e-4, atol=1e-4)


def test_noncontiguous_and_channels_last_inputs():
    ours, theirs = _pair(2, 3, 4, 3, padding=1)
    base = torch.randn(2, 7, 3, 6)
    for x in (base.transpose(1, 2), torch.randn(2, 3, 7, 6).to(memory_format=torch.channels_last)):
        assert not x.is_contiguous()
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("ndim", [1, 2])
def test_half_precision_keeps_its_dtype(dtype, ndim):
    """float16/bfloat16 in, the same out, computed in float32: equal to torch's float32 result rounded once."""
    torch.manual_seed(2)
    shape = (2, 3, 12) if ndim == 1 else (2, 3, 6, 5)
    module = (cst.Conv1d if ndim == 1 else cst.Conv2d)(3, 4, 3, padding=1, backend="numpy").to(dtype)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    y = module(x)
    assert y.dtype == dtype
    conv = TORCH_FUNCTIONAL[ndim]
    x32, w32, b32 = (t.detach().float().requires_grad_() for t in (x, module.weight, module.bias))
    y32 = conv(x32, w32, b32, padding=1)
    # One rounding of the float32 result: within half an ulp of the half dtype, relative to the magnitude.
    ulp = torch.finfo(dtype).eps
    assert torch.all((y.float() - y32).abs() <= ulp * y32.abs() + 1e-6)
    grad_y = torch.randn(y.shape, dtype=dtype)
    y.backward(grad_y)
    y32.backward(grad_y.float())
    for ours, ref in ((x.grad, x32.grad), (module.weight.grad, w32.grad), (module.bias.grad, b32.grad)):
        assert ours.dtype == dtype
        assert torch.all((ours.float() - ref).abs() <= ulp * ref.abs() + 1e-6)


def test_autocast_casts_as_torch_does():
    ours, theirs = _pair(2, 3, 4, 3, padding=1)
    x = torch.randn(2, 3, 6, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_ours, y_theirs = ours(x), theirs(x)
    assert y_ours.dtype == y_theirs.dtype == torch.bfloat16
    torch.testing.assert_close(y_ours, y_theirs, rtol=2e-2, atol=2e-2)
    y_ours.float().sum().backward()
    assert ours.weight.grad.dtype == torch.float32  # the cast is in the graph, outside the Function


def _spy_backward(monkeypatch, ndim=2):
    calls = []
    name = f"conv{ndim}d_backward"
    real = getattr(convsuite._api, name)

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(convsuite._api, name, spy)
    return calls


def test_input_gradient_left_out_when_input_needs_none(monkeypatch):
    calls = _spy_backward(monkeypatch)
    ours, theirs = _pair(2, 3, 4, 3, padding=1)
    x = torch.randn(2, 3, 5, 5)  # the first layer's input: no gradient wanted
    ours(x).sum().backward()
    theirs(x).sum().backward()
    assert [c["input_grad"] for c in calls] == [False]
    assert x.grad is None
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-4, atol=1e-4)
    x.requires_grad_()
    ours(x).sum().backward()
    assert calls[-1]["input_grad"] is True and x.grad is not None


def test_frozen_parameters_get_no_gradient():
    ours, theirs = _pair(2, 3, 4, 3)
    ours.bias.requires_grad_(False)
    x = torch.randn(1, 3, 5, 5, requires_grad=True)
    ours(x).sum().backward()
    theirs(x.detach()).sum().backward()
    assert ours.bias.grad is None
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-4, atol=1e-4)
    ours.weight.requires_grad_(False)
    x.grad = None
    ours(x).sum().backward()
    assert ours.weight.grad is not None and x.grad is not None  # weight's old grad kept, not accumulated
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-4, atol=1e-4)


def test_no_grad_and_inference_mode_record_nothing(monkeypatch):
    calls = _spy_backward(monkeypatch)
    module = cst.Conv2d(3, 4, 3, backend="numpy")
    x = torch.randn(1, 3, 5, 5, requires_grad=True)
    with torch.no_grad():
        y = module(x)
    assert not y.requires_grad and y.grad_fn is None
    with torch.inference_mode():
        x_inference = torch.randn(1, 3, 5, 5)
        z = module(x_inference)
        reference = F.conv2d(x_inference, module.weight, module.bias)
    assert z.grad_fn is None
    torch.testing.assert_close(z, reference, rtol=1e-4, atol=1e-5)
    assert calls == []


def test_double_backward_is_refused():
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    y = cst.conv2d(x, w, backend="numpy")
    (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)  # grad_y = 2y depends on x
    with pytest.raises(RuntimeError, match="differentiate twice.*once_differentiable"):
        gx.sum().backward()


def test_contiguous_input_is_handed_over_without_a_copy(monkeypatch):
    seen = []
    real = convsuite._api.conv2d

    def spy(x, w, bias=None, **kwargs):
        seen.append((x, w))
        return real(x, w, bias, **kwargs)

    monkeypatch.setattr(convsuite._api, "conv2d", spy)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    cst.conv2d(x, w, backend="numpy")
    cst.conv2d(x.transpose(2, 3), w, backend="numpy")
    (x0, w0), (x1, _) = seen
    assert not x0.requires_grad and x0.data_ptr() == x.data_ptr() and w0.data_ptr() == w.data_ptr()
    assert x1.is_contiguous() and x1.data_ptr() != x.data_ptr()


def test_module_is_torchs_module():
    module = cst.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2, backend="numpy", algorithm="im2col")
    assert isinstance(module, tnn.Conv2d) and isinstance(cst.Conv1d(2, 2, 3), tnn.Conv1d)
    assert repr(module) == (
        "Conv2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), groups=2, backend='numpy', algorithm='im2col')"
    )
    assert repr(cst.Conv1d(2, 3, 3)) == repr(tnn.Conv1d(2, 3, 3))
    assert sorted(module.state_dict()) == ["bias", "weight"]
    assert [n for n, _ in module.named_parameters()] == ["weight", "bias"]
    double = module.to(torch.float64)
    assert double is module and module.weight.dtype == torch.float64 and type(module) is cst.Conv2d
    assert module(torch.randn(1, 4, 5, 5, dtype=torch.float64)).dtype == torch.float64
    before = module.weight.detach().clone()
    module.reset_parameters()
    assert not torch.equal(before, module.weight)
    clone = copy.deepcopy(module)
    assert clone.backend == "numpy" and clone.algorithm == "im2col" and clone.weight is not module.weight
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded) is cst.Conv2d and loaded.backend == "numpy"
    torch.testing.assert_close(loaded.weight, module.weight)


def test_module_default_backend_follows_use_backend(monkeypatch):
    seen = []
    real = convsuite._api.conv2d

    def spy(x, w, bias=None, **kwargs):
        seen.append(kwargs["backend"])
        return real(x, w, bias, **kwargs)

    monkeypatch.setattr(convsuite._api, "conv2d", spy)
    module = cst.Conv2d(2, 2, 3)
    x = torch.randn(1, 2, 4, 4)
    with cs.use_backend("python"):
        y = module(x)
    assert seen == [None]  # resolved by convsuite at the call: use_backend is in force
    torch.testing.assert_close(y, F.conv2d(x, module.weight, module.bias), rtol=1e-4, atol=1e-5)


# --- convert ----------------------------------------------------------------------------------------------------


class Branch(tnn.Module):
    """A custom submodule with a ModuleList and a 1-D convolution over the rows."""

    def __init__(self):
        super().__init__()
        self.convs = tnn.ModuleList(
            [tnn.Conv2d(8, 8, 3, padding=1, groups=4), tnn.Conv2d(8, 8, 3, padding="same", dilation=2, bias=False)]
        )
        self.rows = tnn.Conv1d(8, 8, 3, padding=1, padding_mode="circular")

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x + self.rows(x.mean(dim=2)).unsqueeze(2)


class Net(tnn.Module):
    def __init__(self):
        super().__init__()
        self.stem = tnn.Sequential(tnn.Conv2d(3, 8, 3, stride=2, padding=1), tnn.BatchNorm2d(8), tnn.ReLU())
        self.branch = Branch()
        self.shared = tnn.Conv2d(8, 8, 1)
        self.up = tnn.ConvTranspose2d(8, 4, 2, stride=2)  # not a convolution convsuite runs
        self.head = tnn.Sequential(tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(4, 5))

    def forward(self, x):
        x = self.branch(self.stem(x))
        x = self.shared(self.shared(x))  # one module used twice
        return self.head(self.up(x))


def _net():
    torch.manual_seed(3)
    net = Net()
    net.stem[1].running_mean.uniform_(-0.1, 0.1)
    return net.eval()


def _conv_types(model):
    return {name: type(m) for name, m in model.named_modules() if isinstance(m, (tnn.Conv1d, tnn.Conv2d))}


def test_convert_gives_the_same_logits_and_gradients():
    net = _net()
    converted = cst.convert(net, backend="numpy")
    assert converted is not net
    assert set(_conv_types(net).values()) == {tnn.Conv1d, tnn.Conv2d}  # the original untouched
    types = _conv_types(converted)
    assert sorted(types) == ["branch.convs.0", "branch.convs.1", "branch.rows", "shared", "stem.0"]
    assert types["branch.rows"] is cst.Conv1d and all(t in (cst.Conv1d, cst.Conv2d) for t in types.values())
    assert type(converted.up) is tnn.ConvTranspose2d
    assert all(m.backend == "numpy" and m.algorithm == "auto" for m in converted.modules() if type(m) in types.values())
    x = torch.randn(2, 3, 12, 10)
    torch.testing.assert_close(converted(x), net(x), rtol=1e-4, atol=1e-5)
    net.train(), converted.train()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    net(xa).logsumexp(dim=1).sum().backward()
    converted(xb).logsumexp(dim=1).sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-4, atol=1e-5)
    theirs = dict(net.named_parameters())
    for name, p in converted.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-4, msg=name)


def test_convert_in_place_keeps_the_parameter_objects_and_the_optimizer():
    net = _net().train()
    params = {name: p for name, p in net.named_parameters()}
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    shared = net.shared
    assert cst.convert(net, backend="numpy", inplace=True) is net
    assert net.shared is shared and type(shared) is cst.Conv2d  # the same module object, now ours
    assert all(p is params[name] for name, p in net.named_parameters())
    before = net.stem[0].weight.detach().clone()
    net(torch.randn(2, 3, 8, 8)).sum().backward()
    optimizer.step()
    assert not torch.equal(before, net.stem[0].weight)


def test_convert_state_dict_round_trip():
    net = _net()
    converted = cst.convert(net, backend="numpy")
    state = converted.state_dict()
    assert list(state) == list(net.state_dict())
    fresh = Net().eval()
    fresh.load_state_dict(state)  # ours -> torch
    x = torch.randn(1, 3, 8, 8)
    torch.testing.assert_close(fresh(x), converted(x), rtol=1e-4, atol=1e-5)
    again = cst.convert(Net(), backend="numpy").eval()
    again.load_state_dict(net.state_dict())  # torch -> ours
    torch.testing.assert_close(again(x), net(x), rtol=1e-4, atol=1e-5)


def test_convert_a_bare_convolution_a_subclass_and_ours():
    class Plain(tnn.Conv2d):
        """A subclass that keeps torch's forward."""

    torch.manual_seed(4)
    assert type(cst.convert(tnn.Conv1d(2, 3, 3))) is cst.Conv1d
    model = tnn.Sequential(Plain(2, 3, 3), cst.Conv2d(3, 3, 1, backend="python"))
    converted = cst.convert(model, backend="numpy", algorithm="im2col")
    assert type(converted[0]) is cst.Conv2d and converted[0].algorithm == "im2col"
    assert converted[1].backend == "python" and converted[1].algorithm == "auto"  # already ours: kept
    x = torch.randn(1, 2, 5, 5)
    torch.testing.assert_close(converted(x), model(x), rtol=1e-4, atol=1e-5)


def test_convert_keeps_hooks_and_training_mode():
    net = tnn.Sequential(tnn.Conv2d(2, 3, 3), tnn.ReLU()).eval()
    seen = []
    net[0].register_forward_hook(lambda module, args, out: seen.append(out.shape))
    converted = cst.convert(net, backend="numpy")
    converted(torch.randn(1, 2, 5, 5))
    assert seen == [torch.Size([1, 3, 3, 3])] and not converted[0].training


class OwnForward(tnn.Conv2d):
    def forward(self, x):
        return super().forward(x) * 2


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: tnn.Sequential(tnn.Conv2d(2, 2, 1), OwnForward(2, 2, 1)), r"module '1' is a OwnForward.*own forward"),
        (
            lambda: tnn.Sequential(
                tnn.Conv2d(2, 2, 1),
                torch.nn.utils.parametrizations.weight_norm(tnn.Conv2d(2, 2, 1)),
            ),
            "module '1'.*parametrizations",
        ),
        (lambda: tnn.Sequential(tnn.Conv2d(2, 2, 1), tnn.LazyConv2d(2, 1)), "module '1'.*lazy"),
    ],
    ids=["own-forward", "parametrized", "lazy"],
)
def test_convert_refuses_what_it_cannot_carry_and_changes_nothing(make, match):
    model = make()
    types = [type(m) for m in model]
    with pytest.raises(ValueError, match=match):
        cst.convert(model, inplace=True)
    assert [type(m) for m in model] == types


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(model="net"), TypeError, r"`model` must be a torch.nn.Module; got str"),
        (dict(backend="nump"), ValueError, r"`backend` must be None or one of .*'numpy'.*; got 'nump'"),
        (dict(backend=3), ValueError, r"`backend` must be .*; got 3"),
        (dict(algorithm=None), TypeError, r"`algorithm` must be a string"),
        (dict(algorithm="fastest"), ValueError, r"`algorithm` must be 'auto' or one of .*; got 'fastest'"),
        (dict(backend="numpy", algorithm="gemm"), ValueError, r"backend 'numpy'.*'im2col'.*got 'gemm'"),
        (dict(inplace="yes"), TypeError, r"`inplace` must be True or False; got 'yes'"),
    ],
)
def test_convert_argument_errors(kwargs, error, match):
    model = kwargs.pop("model", tnn.Conv2d(1, 1, 1))
    with pytest.raises(error, match=match):
        cst.convert(model, **kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(backend="nump"), ValueError, r"`backend` must be None or one of"),
        (dict(algorithm=1), TypeError, r"`algorithm` must be a string"),
        (dict(backend="python", algorithm="im2col"), ValueError, r"backend 'python'.*'direct'.*got 'im2col'"),
    ],
)
def test_module_setting_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        cst.Conv2d(2, 2, 3, **kwargs)


def test_torchs_own_module_checks_still_apply():
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        cst.Conv2d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        cst.Conv1d(2, 2, 3, padding_mode="mirror")


def test_functional_operand_errors():
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    with pytest.raises(TypeError, match=r"`input` must be a torch.Tensor; got ndarray"):
        cst.conv2d(x.numpy(), w)
    with pytest.raises(TypeError, match=r"`input` must be a floating-point tensor.*got torch.int64"):
        cst.conv2d(x.long(), w.long())
    with pytest.raises(TypeError, match=r"`weight` must have the dtype of `input` \(torch.float64\).*float32"):
        cst.conv2d(x.double(), w)
    with pytest.raises(TypeError, match=r"`bias` must have the dtype of `input`"):
        cst.conv2d(x, w, torch.zeros(3, dtype=torch.float64))
    module = cst.Conv2d(2, 3, 3, backend="numpy")
    with pytest.raises(TypeError, match=r"`weight` must have the dtype of `input` \(torch.float64\)"):
        module(x.double())  # as torch's module refuses a float64 input to float32 weights
    with pytest.raises(ValueError, match="channel"):
        module(torch.randn(1, 4, 5, 5))
    if not {i.name: i for i in cs.list_backends()}["cupy"].available:
        with pytest.raises(cs.BackendUnavailableError, match="cupy"):
            cst.conv2d(x, w, backend="cupy")


# --- the package ------------------------------------------------------------------------------------------------


def test_importing_convsuite_imports_no_torch_and_convsuite_torch_the_real_one():
    code = (
        "import sys, convsuite\n"
        "assert 'torch' not in sys.modules and not hasattr(convsuite, 'torch')\n"
        "import convsuite.torch as cst, convsuite.torch._function as f\n"
        "import torch\n"
        "assert f.torch is torch is sys.modules['torch'] and hasattr(torch, 'autograd')\n"
        "assert cst.__name__ == 'convsuite.torch' and 'convsuite' not in torch.__file__\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_module_docstring_example_runs():
    result = doctest.testmod(cst, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0


def test_gradients_match_convsuite_backward_directly():
    """The Function's gradients are exactly convsuite's backward on the same arrays (no extra arithmetic)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 6, 5))
    w = rng.standard_normal((4, 3, 3, 3))
    grad_y = rng.standard_normal((2, 4, 3, 3))
    kwargs = dict(stride=2, padding=1, backend="numpy")
    expected = cs.conv2d_backward(grad_y, x, w, **kwargs)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, np.zeros(4)))
    cst.conv2d(tx, tw, tb, **kwargs).backward(torch.tensor(grad_y))
    for got, want in zip((tx.grad, tw.grad, tb.grad), expected):
        np.testing.assert_array_equal(got.numpy(), want)


# --- CUDA tensors (run on a GPU machine: pytest -m gpu) ----------------------------------------------------------

_CUPY = {i.name: i for i in cs.list_backends()}["cupy"]
_NO_CUDA = (
    f"cupy backend unavailable: {_CUPY.reason}"
    if not _CUPY.available
    else (None if torch.cuda.is_available() else "torch sees no CUDA device")
)
needs_cuda = pytest.mark.skipif(_NO_CUDA is not None, reason=_NO_CUDA or "")


@pytest.fixture
def exact_cuda():
    """torch's CUDA convolutions without TF32: the float32 reference."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("backend", [None, "cupy"])
@pytest.mark.parametrize("key", [(2, "groups"), (2, "same-dilated"), (1, "stride")], ids=lambda k: f"{k[0]}d-{k[1]}")
def test_gradcheck_float64_cuda(key, backend):
    x, w, b, keywords = _operands(key)
    x, w, b = (None if t is None else t.detach().cuda().requires_grad_() for t in (x, w, b))
    conv = FUNCTIONAL[key[0]]
    inputs = (x, w) if b is None else (x, w, b)

    def run(*tensors):
        return conv(*tensors, backend=backend, **keywords)

    y = run(*inputs)
    assert y.device == x.device and y.dtype == torch.float64
    torch.testing.assert_close(y, TORCH_FUNCTIONAL[key[0]](*inputs, **keywords), rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cuda_module_matches_torch(dtype, exact_cuda):
    ours, theirs = _pair(2, 4, 6, 3, stride=2, padding=1, groups=2)
    ours.backend = None  # a CUDA tensor's own backend (cupy) by the usual selection
    ours, theirs = ours.to("cuda", dtype), theirs.to("cuda", torch.float32)
    x = torch.randn(2, 4, 9, 8, device="cuda", dtype=dtype, requires_grad=True)
    y = ours(x)
    assert y.device == x.device and y.dtype == dtype
    x32 = x.detach().float().requires_grad_()
    y32 = theirs(x32)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2 * torch.finfo(dtype).eps, atol=1e-3)
    torch.testing.assert_close(y.float(), y32, **tol)
    grad_y = torch.randn(y.shape, device="cuda", dtype=dtype)
    y.backward(grad_y)
    y32.backward(grad_y.float())
    assert x.grad.dtype == ours.weight.grad.dtype == dtype and x.grad.device == x.device
    torch.testing.assert_close(x.grad.float(), x32.grad, **tol)
    torch.testing.assert_close(ours.weight.grad.float(), theirs.weight.grad, **tol)


@pytest.mark.gpu
@needs_cuda
def test_convert_cuda_model(exact_cuda):
    net = _net().cuda()
    converted = cst.convert(net)
    x = torch.randn(2, 3, 12, 10, device="cuda")
    torch.testing.assert_close(converted(x), net(x), rtol=1e-4, atol=1e-5)
    converted.train()(x).sum().backward()
    assert all(p.grad is not None and p.grad.is_cuda for p in converted.parameters())


@pytest.mark.gpu
@needs_cuda
def test_cuda_tensors_on_a_cpu_backend_come_back_to_their_device(exact_cuda):
    x = torch.randn(1, 2, 5, 5, device="cuda", requires_grad=True)
    w = torch.randn(3, 2, 3, 3, device="cuda", requires_grad=True)
    y = cst.conv2d(x, w, padding=1, backend="numpy")  # convsuite moves them to the host and back
    assert y.is_cuda
    torch.testing.assert_close(y, F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-5)
    y.sum().backward()
    assert x.grad.is_cuda and w.grad.is_cuda
    with pytest.raises(ValueError, match=r"`weight` must be on the device of `input` \(cuda:0\); got cpu"):
        cst.conv2d(x, w.detach().cpu())
