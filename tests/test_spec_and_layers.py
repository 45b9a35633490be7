"""Geometry rules, layer objects, and the NumPy backend's tiling paths."""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends import numpy_backend

from .cases import Case
from .test_agreement import check_backward, check_forward


@pytest.mark.parametrize("n", range(1, 12))
@pytest.mark.parametrize("stride", [1, 2, 3, 5])
@pytest.mark.parametrize("kernel", [1, 2, 3, 4, 7])
def test_same_gives_ceil_n_over_stride_at_any_stride(n, stride, kernel):
    x = np.ones((1, 1, n))
    w = np.ones((1, 1, kernel))
    assert cs.conv1d(x, w, stride=stride, padding="same").shape[-1] == -(-n // stride)


def test_same_puts_the_odd_pixel_after():
    # Kernel 2, stride 1: one pixel of padding in total, on the right (TF and PyTorch).
    y = cs.conv1d(np.array([1.0, 2.0, 3.0]), np.array([1.0, 10.0]), padding="same")
    np.testing.assert_array_equal(y, [21.0, 32.0, 3.0])
    spec = cs.explain(np.ones((1, 1, 5, 6)), np.ones((1, 1, 2, 3)), stride=2, padding="same").spec
    assert spec.padding == ((0, 1), (0, 1)) and spec.out_size == (3, 3)


def test_full_and_valid_sizes():
    x, w = np.ones(10), np.ones(4)
    assert cs.conv1d(x, w, padding="full").shape == (13,)
    assert cs.conv1d(x, w, padding="valid").shape == (7,)
    assert cs.conv1d(x, w, padding="full", dilation=2).shape == (16,)


def test_plain_image_shorthand():
    img = np.arange(16.0).reshape(4, 4)
    y = cs.conv2d(img, np.ones((2, 2)))
    assert y.shape == (3, 3) and y[0, 0] == 0 + 1 + 4 + 5


def test_spec_counts():
    spec = cs.explain(np.ones((2, 4, 8, 8)), np.ones((6, 2, 3, 3)), groups=2).spec
    assert spec.reduction_length == 18 and spec.macs == 2 * 6 * 36 * 18 and spec.flops == 2 * spec.macs
    assert spec.as_2d() is spec
    one_d = cs.explain(np.ones((2, 4, 8)), np.ones((6, 4, 3)), stride=2, padding=1).spec.as_2d()
    assert one_d.kernel_size == (1, 3) and one_d.stride == (1, 2) and one_d.padding == ((0, 0), (1, 1))


@pytest.mark.parametrize("workspace", [200, 2000, 20000])
@pytest.mark.parametrize("ndim", [1, 2])
def test_numpy_tiles_cover_every_output(monkeypatch, workspace, ndim):
    """Tiny workspaces force column, row and batch tiling; all must agree."""
    monkeypatch.setattr(numpy_backend, "WORKSPACE_BYTES", workspace)
    for padding, stride in (("same", (2, 3)), ("full", (1, 1)), (((2, 0), (1, 3)), (3, 2))):
        case = Case(
            ndim=ndim,
            layout="batched",
            batch=3,
            groups=2,
            channels_per_group=2,
            out_per_group=2,
            in_size=(11, 13)[:ndim] if ndim == 2 else (37,),
            kernel=(3, 2)[:ndim],
            stride=stride[:ndim],
            dilation=(2, 1)[:ndim],
            padding=padding if not isinstance(padding, tuple) else padding[-ndim:],
            dtype=np.float64,
            bias=True,
            noncontiguous=False,
            seed=3,
        )
        check_forward(case, "numpy")
        check_backward(case, "numpy")


class TestLayers:
    def test_pytorch_default_initialisation_bounds(self):
        layer = cs.Conv2D(8, 16, 3, groups=2, seed=0)
        bound = 1 / np.sqrt(4 * 9)
        assert layer.weight.shape == (16, 4, 3, 3) and layer.weight.dtype == np.float32
        assert np.abs(layer.weight).max() <= bound and np.abs(layer.weight).max() > 0.9 * bound
        assert layer.bias.shape == (16,) and np.abs(layer.bias).max() <= bound
        assert np.array_equal(cs.Conv2D(8, 16, 3, groups=2, seed=0).weight, layer.weight)

    def test_call_and_backward(self, backend):
        layer = cs.Conv1D(3, 4, 5, padding="same", stride=2, dtype="float64", seed=1, backend=backend)
        x = np.random.default_rng(0).standard_normal((2, 3, 17))
        y = layer(x)
        assert isinstance(y, np.ndarray)  # NumPy in, NumPy out, wherever the weights live
        host = [p.get() if hasattr(p, "get") else p for p in (layer.weight, layer.bias)]  # a GPU layer's weights
        expected = cs.conv1d(x, *host, padding="same", stride=2, backend="numpy")
        np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
        gx, gw, gb = layer.backward(np.ones_like(y), x)
        assert gx.shape == x.shape and gw.shape == layer.weight.shape and gb.shape == (4,)
        assert cs.Conv2D(2, 2, 1, bias=False).backward(np.ones((1, 2, 3, 3)), np.ones((1, 2, 3, 3)))[2] is None

    def test_repr(self):
        text = repr(cs.Conv2D(3, 8, (3, 5), stride=2, padding="same", bias=False))
        assert text.startswith("Conv2D(3, 8, kernel_size=(3, 5), stride=(2, 2), padding=same")

    @pytest.mark.parametrize(
        "kwargs, error, fragment",
        [
            (dict(in_channels=0), ValueError, "`in_channels`"),
            (dict(out_channels=2.5), TypeError, "`out_channels`"),
            (dict(kernel_size=(3, 3, 3)), TypeError, "`kernel_size`"),
            (dict(groups=3), ValueError, "`groups`"),
            (dict(padding="middle"), ValueError, "`padding`"),
            (dict(stride=0), ValueError, "`stride`"),
            (dict(dtype="int8"), TypeError, "`dtype`"),
            (dict(dtype="not-a-dtype"), TypeError, "`dtype`"),
            (dict(bias="yes"), TypeError, "`bias`"),
            (dict(backend="gpu9000"), ValueError, "`backend`"),
            (dict(seed="abc"), TypeError, "`seed`"),
            (dict(in_channels=2**40, out_channels=2**40), ValueError, "in_channels=1099511627776"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, fragment):
        args = dict(in_channels=4, out_channels=8, kernel_size=3)
        args.update(kwargs)
        with pytest.raises(error, match=fragment):
            cs.Conv2D(**args)

    def test_lists_are_read_as_arrays(self):
        """As cs.conv2d reads them: the layer's plan takes NumPy arrays, a list is converted first."""
        layer = cs.Conv2D(2, 3, 3, seed=0)
        x = np.random.default_rng(1).standard_normal((1, 2, 5, 5))
        np.testing.assert_array_equal(layer(x.tolist()), layer(x))
        gy = np.ones((1, 3, 3, 3))
        for got, want in zip(layer.backward(gy.tolist(), x.tolist()), layer.backward(gy, x)):
            np.testing.assert_array_equal(got, want)

    def test_wrong_input_channels_name_in_channels_and_the_layer(self):
        layer = cs.Conv2D(4, 16, 3)
        want = (
            "Conv2D(4, 16, kernel_size=(3, 3)) expects x of shape (B, 4, H, W) or (4, H, W), with in_channels=4 "
            "channels; got x of shape (2, 3, 8, 8), with 3 channels on axis 1"
        )
        for call in (lambda x: layer(x), lambda x: layer.backward(np.ones((2, 16, 6, 6)), x)):
            with pytest.raises(ValueError) as info:
                call(np.ones((2, 3, 8, 8)))
            assert str(info.value) == want  # nothing about the weight's w.shape[1], which the user never passed
        with pytest.raises(
            ValueError,
            match=r"^Conv1D\(2, 5, kernel_size=\(3,\)\) expects x of shape \(B, 2, W\) or "
            r"\(2, W\), with in_channels=2 channels; got x of shape \(3, 9\), with 3 channels on axis 0$",
        ):
            cs.Conv1D(2, 5, 3)(np.ones((3, 9)))

    @pytest.mark.parametrize(
        "cls, x_shape, order", [(cs.Conv2D, (2, 9, 7, 4), (0, 3, 1, 2)), (cs.Conv1D, (9, 4), (1, 0))]
    )
    def test_channels_last_input_to_a_layer_gets_the_transpose_that_fixes_it(self, cls, x_shape, order):
        layer = cls(4, 6, 3, seed=0, dtype="float64")
        x = np.random.default_rng(2).standard_normal(x_shape)
        text = ", ".join(map(str, order))
        with pytest.raises(
            ValueError,
            match=rf"x looks channels-last .*: pass x\.transpose\({text}\) "
            rf"\(a torch tensor: x\.permute\({text}\)\)$",
        ):
            layer(x)
        conv = cs.conv2d if cls is cs.Conv2D else cs.conv1d
        want = conv(
            np.moveaxis(x, -1, len(x_shape) - layer._ndim - 1),
            np.asarray(layer.weight),
            np.asarray(layer.bias),
            backend="numpy",
        )
        np.testing.assert_allclose(layer(x.transpose(order)), want, rtol=1e-12, atol=1e-12)

    def test_layer_checks_the_channels_of_the_data_not_a_shape_attribute(self):
        class Liar:
            """An array-like whose ``.shape`` attribute disagrees with its data."""

            def __init__(self, array, shape):
                self.array, self.shape, self.dtype = array, shape, array.dtype

            def __array__(self, dtype=None, copy=None):
                return self.array if dtype is None else self.array.astype(dtype)

        layer = cs.Conv2D(4, 2, 3, seed=0)
        with pytest.raises(ValueError, match=r"got x of shape \(1, 3, 5, 5\), with 3 channels on axis 1$"):
            layer(Liar(np.ones((1, 3, 5, 5), np.float32), (1, 4, 5, 5)))
        real = np.random.default_rng(3).standard_normal((1, 4, 5, 5)).astype(np.float32)
        np.testing.assert_array_equal(layer(Liar(real, (1, 3, 5, 5))), layer(real))

    def test_layer_reads_an_array_like_once_per_call(self):
        class Counting:
            def __init__(self, array):
                self.array, self.reads = array, 0

            def __array__(self, dtype=None, copy=None):
                self.reads += 1
                return self.array if dtype is None else self.array.astype(dtype)

        layer = cs.Conv2D(2, 3, 3, seed=0)
        real = np.random.default_rng(4).standard_normal((1, 2, 5, 5)).astype(np.float32)
        x = Counting(real)
        np.testing.assert_array_equal(layer(x), layer(real))
        assert x.reads == 1
        x = Counting(real)
        for got, want in zip(
            layer.backward(np.ones((1, 3, 3, 3), np.float32), x),
            layer.backward(np.ones((1, 3, 3, 3), np.float32), real),
        ):
            np.testing.assert_array_equal(got, want)
        assert x.reads == 1

    def test_torch_tensors_through_a_layer_come_back_as_torch_tensors(self):
        torch = pytest.importorskip("torch")
        layer = cs.Conv2D(3, 4, 3, seed=0, dtype="float64")
        x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
        w, b = torch.from_numpy(np.asarray(layer.weight)), torch.from_numpy(np.asarray(layer.bias))
        y = layer(x)
        assert isinstance(y, torch.Tensor)
        torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, b))
        gy = torch.randn(2, 4, 4, 4, dtype=torch.float64)
        xr = x.clone().requires_grad_(True)
        torch.nn.functional.conv2d(xr, w, b).backward(gy)
        gx = layer.backward(gy)  # after the forward: grad_x in the forward input's kind
        assert isinstance(gx, torch.Tensor)
        torch.testing.assert_close(gx, xr.grad)
        gx, gw, gb = layer.backward(gy, x)  # stand-alone: every gradient in x's kind
        assert all(isinstance(g, torch.Tensor) for g in (gx, gw, gb))
        torch.testing.assert_close(gx, xr.grad)
