"""Generate convsuite/data/zoo.json: the distinct convolution layers of real networks.

    python tools/make_zoo.py            # write convsuite/data/zoo.json, print a summary
    python tools/make_zoo.py --check    # regenerate in memory; exit 1 unless the file is byte-identical

Needs torch and torchvision (not dependencies of convsuite; use a venv of their own). No weights are
downloaded: every model is built with ``weights=None``, only shapes matter. Every nn.Conv1d/nn.Conv2d gets a
forward hook and the model runs once at its standard input, batch 1, in eval mode, so each layer is recorded
with the sizes it really sees. ConvTranspose layers are not convolutions convsuite runs: they are not hooked
(they are not nn.Conv1d subclasses) but still run, so the lengths after them are right.

The 1-D networks are written here from their papers as small nn.Module definitions holding only what decides
the convolutions' shapes (no normalisation or dropout); each cites its paper and says what was assumed where
the paper is silent.

Set-up, once: python3 -m venv /tmp/zoo-venv && /tmp/zoo-venv/bin/pip install torch torchvision numpy
(the versions used are recorded in the file); then run this script with that venv's python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from convsuite._spec import output_length, same_padding  # noqa: E402
from convsuite.bench.zoo import layer_class  # noqa: E402  (the one class rule, shared with the loader)

OUT = ROOT / "convsuite" / "data" / "zoo.json"
IMAGE = (1, 3, 224, 224)
TORCHVISION = {
    "resnet18": IMAGE,
    "mobilenet_v2": IMAGE,
    "mobilenet_v3_large": IMAGE,
    "convnext_tiny": IMAGE,
    "inception_v3": (1, 3, 299, 299),
    "densenet121": IMAGE,
    "squeezenet1_1": IMAGE,
    "shufflenet_v2_x1_0": IMAGE,
    "regnet_y_400mf": IMAGE,
    "googlenet": IMAGE,
}
SMALL_SPATIAL = 196  # 14x14: the late stages of an ImageNet network, where a layer is mostly channels


# --- 1-D networks, from their papers ----------------------------------------------------------------------


def _separable(c_in: int, c_out: int, k: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    """Depthwise K then pointwise 1x1, no bias (a batch norm follows each in QuartzNet)."""
    pad = dilation * (k - 1) // 2
    return nn.Sequential(
        OrderedDict(
            dw=nn.Conv1d(c_in, c_in, k, stride, pad, dilation, groups=c_in, bias=False),
            pw=nn.Conv1d(c_in, c_out, 1, bias=False),
        )
    )


class _QuartzBlock(nn.Module):
    """R separable sub-blocks, plus the residual path's pointwise conv (see the assumptions of QuartzNet5x5)."""

    def __init__(self, c_in: int, c_out: int, k: int, repeats: int = 5):
        super().__init__()
        self.subs = nn.Sequential(*[_separable(c_in if i == 0 else c_out, c_out, k) for i in range(repeats)])
        self.residual = nn.Conv1d(c_in, c_out, 1, bias=False)

    def forward(self, x):
        return self.subs(x) + self.residual(x)


class QuartzNet5x5(nn.Module):
    """QuartzNet 5x5: Kriman et al., "QuartzNet: Deep automatic speech recognition with 1D time-channel
    separable convolutions", ICASSP 2020 (arXiv:1910.10261), Table 1.

    Assumed: C1 is separable too and the residual path of each block is a 1x1 conv even where channels
    match (as in the authors' NeMo configuration); "same" padding (K-1)*d/2, also for the stride-2 C1;
    bias only on C4 (every other conv feeds a batch norm); 29 outputs (English characters + blank).
    """

    def __init__(self):
        super().__init__()
        self.c1 = _separable(64, 256, 33, stride=2)
        widths = [(256, 256, 33), (256, 256, 39), (256, 512, 51), (512, 512, 63), (512, 512, 75)]
        self.blocks = nn.Sequential(*[_QuartzBlock(c_in, c_out, k) for c_in, c_out, k in widths])
        self.c2 = _separable(512, 512, 87, dilation=2)
        self.c3 = nn.Conv1d(512, 1024, 1, bias=False)
        self.c4 = nn.Conv1d(1024, 29, 1)

    def forward(self, x):
        return self.c4(self.c3(self.c2(self.blocks(self.c1(x)))))


class _TasNetBlock(nn.Module):
    """1x1 B->H, depthwise P dilated ("same"), then the residual and skip 1x1s H->B and H->Sc."""

    def __init__(self, dilation: int, b: int = 128, h: int = 512, p: int = 3, sc: int = 128):
        super().__init__()
        self.inp = nn.Conv1d(b, h, 1)
        self.dw = nn.Conv1d(h, h, p, dilation=dilation, padding="same", groups=h)
        self.res = nn.Conv1d(h, b, 1)
        self.skip = nn.Conv1d(h, sc, 1)

    def forward(self, x):
        y = self.dw(self.inp(x))
        return x + self.res(y), self.skip(y)


class ConvTasNet(nn.Module):
    """Conv-TasNet: Luo & Mesgarani, "Conv-TasNet: Surpassing ideal time-frequency magnitude masking for
    speech separation", IEEE/ACM TASLP 27(8), 2019; the best configuration of Table I (N=512, L=16,
    B=128, Sc=128, H=512, P=3, X=8, R=3), non-causal.

    Assumed: the encoder has no bias and no input padding (4 s at 8 kHz gives 3999 frames); the 1x1
    convs of the separator have PyTorch's default bias; the mask layer is a 1x1 Sc -> 2*N (two speakers,
    WSJ0-2mix). The decoder is a transposed conv and is left out.
    """

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 512, 16, stride=8, bias=False)
        self.bottleneck = nn.Conv1d(512, 128, 1)
        self.blocks = nn.ModuleList([_TasNetBlock(2**x) for _ in range(3) for x in range(8)])
        self.mask = nn.Conv1d(128, 2 * 512, 1)

    def forward(self, x):
        x = self.bottleneck(self.encoder(x))
        skips = 0
        for block in self.blocks:
            x, skip = block(x)
            skips = skips + skip
        return self.mask(skips)


class _ResBlock1(nn.Module):
    """HiFi-GAN's ResBlock1: per dilation, a dilated conv then a dilation-1 conv of the same K, residual."""

    def __init__(self, ch: int, k: int, dilations=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList([nn.Conv1d(ch, ch, k, dilation=d, padding=d * (k - 1) // 2) for d in dilations])
        self.convs2 = nn.ModuleList([nn.Conv1d(ch, ch, k, padding=(k - 1) // 2) for _ in dilations])

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, 0.1)), 0.1))
        return x


class HiFiGanV1(nn.Module):
    """HiFi-GAN V1 generator: Kong, Kim & Bae, "HiFi-GAN: Generative adversarial networks for efficient
    and high fidelity speech synthesis", NeurIPS 2020 (arXiv:2010.05646), Appendix A (h_u=512, k_u=16,16,4,4,
    upsample rates 8,8,2,2, k_r=3,7,11, D_r=1,3,5 each).

    Assumed: 80 mel bands, 32 frames (8192 samples out); K=7 for conv_pre and conv_post with "same"
    padding, as in the authors' code; every conv has a bias. The upsampling ConvTranspose1d layers run
    (kernel 2u, stride u, padding u/2) but are not recorded.
    """

    def __init__(self):
        super().__init__()
        self.conv_pre = nn.Conv1d(80, 512, 7, padding=3)
        rates, kernels = (8, 8, 2, 2), (16, 16, 4, 4)
        chans = [512 // 2**i for i in range(len(rates) + 1)]
        self.ups = nn.ModuleList(
            [
                nn.ConvTranspose1d(chans[i], chans[i + 1], k, u, (k - u) // 2)
                for i, (u, k) in enumerate(zip(rates, kernels))
            ]
        )
        self.mrfs = nn.ModuleList([nn.ModuleList([_ResBlock1(chans[i + 1], k) for k in (3, 7, 11)]) for i in range(4)])
        self.conv_post = nn.Conv1d(chans[-1], 1, 7, padding=3)

    def forward(self, x):
        x = self.conv_pre(x)
        for up, mrf in zip(self.ups, self.mrfs):
            x = up(F.leaky_relu(x, 0.1))
            x = sum(block(x) for block in mrf) / len(mrf)
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


class Wav2Vec2Base(nn.Module):
    """wav2vec 2.0 base: Baevski et al., "wav2vec 2.0: A framework for self-supervised learning of speech
    representations", NeurIPS 2020 (arXiv:2006.11477), Sections 2 and 4.2: the feature encoder (7 convs of
    512 channels, kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2) and the convolutional relative positional
    embedding (kernel 128, 16 groups) on the 768-wide base model.

    Assumed: no bias in the feature encoder and a bias on the positional conv (fairseq's base config);
    padding 64 on the positional conv (its last output is dropped in fairseq, not modelled here); the
    512 -> 768 projection is a linear layer between them.
    """

    def __init__(self):
        super().__init__()
        kernels, strides = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
        self.feature_extractor = nn.Sequential(
            *[nn.Conv1d(1 if i == 0 else 512, 512, k, s, bias=False) for i, (k, s) in enumerate(zip(kernels, strides))]
        )
        self.projection = nn.Linear(512, 768)
        self.pos_conv = nn.Conv1d(768, 768, 128, padding=64, groups=16)

    def forward(self, x):
        x = self.projection(self.feature_extractor(x).transpose(1, 2)).transpose(1, 2)
        return self.pos_conv(x)


class _CausalConv1d(nn.Conv1d):
    """A conv that sees only the past: padded by dilation*(K-1) on the left, nothing on the right."""

    def __init__(self, c_in: int, c_out: int, k: int, dilation: int):
        super().__init__(c_in, c_out, k, dilation=dilation)
        self.pad_sides = ((dilation * (k - 1), 0),)  # read by the hook: torch modules pad both sides alike

    def forward(self, x):
        return super().forward(F.pad(x, self.pad_sides[0]))


class _WaveNetLayer(nn.Module):
    """Dilated causal K=2 conv to filter and gate halves, tanh * sigmoid, then 1x1 residual and skip."""

    def __init__(self, dilation: int, res: int = 64, skip: int = 256):
        super().__init__()
        self.filter_gate = _CausalConv1d(res, 2 * res, 2, dilation)
        self.residual = nn.Conv1d(res, res, 1)
        self.skip = nn.Conv1d(res, skip, 1)

    def forward(self, x):
        f, g = self.filter_gate(x).chunk(2, dim=1)
        z = torch.tanh(f) * torch.sigmoid(g)
        return x + self.residual(z), self.skip(z)


class WaveNet(nn.Module):
    """WaveNet: van den Oord et al., "WaveNet: A generative model for raw audio", arXiv:1609.03499, 2016,
    Sections 2.1-2.4 and Fig. 4: 256-way mu-law input and softmax output, dilated causal convolutions with
    dilations 1, 2, ..., 512 repeated, gated activation units, residual and skip 1x1 convs, then ReLU, 1x1,
    ReLU, 1x1.

    Assumed (the paper gives no widths): 64 residual channels, a single 64 -> 128 conv producing filter and
    gate, 256 skip channels, a 1x1 input conv from the one-hot input, two stacks, 1 s at 16 kHz, biases on.
    """

    def __init__(self):
        super().__init__()
        self.input = nn.Conv1d(256, 64, 1)
        self.layers = nn.ModuleList([_WaveNetLayer(2**i) for _ in range(2) for i in range(10)])
        self.post1 = nn.Conv1d(256, 256, 1)
        self.post2 = nn.Conv1d(256, 256, 1)

    def forward(self, x):
        x = self.input(x)
        skips = 0
        for layer in self.layers:
            x, skip = layer(x)
            skips = skips + skip
        return self.post2(F.relu(self.post1(F.relu(skips))))


PAPERS = {
    "quartznet5x5": (QuartzNet5x5, (1, 64, 1000)),
    "conv_tasnet": (ConvTasNet, (1, 1, 32000)),
    "hifigan_v1": (HiFiGanV1, (1, 80, 32)),
    "wav2vec2_base": (Wav2Vec2Base, (1, 1, 16000)),
    "wavenet": (WaveNet, (1, 256, 16000)),
}


# --- walking a network ------------------------------------------------------------------------------------


def _padding_sides(module: nn.Module, in_size: tuple) -> list:
    """Per-side zero padding of a conv module, with "same"/"valid" resolved to ints."""
    if module.padding_mode != "zeros":
        raise ValueError(f"{module}: padding_mode {module.padding_mode!r} is not zero padding")
    if hasattr(module, "pad_sides"):  # padded by the module's own forward (causal)
        assert all(p == 0 for p in module.padding)
        return [list(p) for p in module.pad_sides]
    if module.padding == "valid":
        return [[0, 0] for _ in in_size]
    if module.padding == "same":  # torch allows it at stride 1 only, where its rule is convsuite's
        assert all(s == 1 for s in module.stride)
        return [list(same_padding(n, k, 1, d)) for n, k, d in zip(in_size, module.kernel_size, module.dilation)]
    return [[p, p] for p in module.padding]


def _record(module: nn.Module, path: str, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One occurrence of a conv: its geometry as run, its class and flags."""
    op = "conv1d" if isinstance(module, nn.Conv1d) else "conv2d"
    in_size, out_size = tuple(x.shape[2:]), tuple(y.shape[2:])
    pads = _padding_sides(module, in_size)
    geometry = zip(in_size, pads, module.kernel_size, module.stride, module.dilation)
    expected = tuple(output_length(n, tuple(p), k, s, d) for n, p, k, s, d in geometry)
    assert expected == out_size, f"{path}: recorded geometry gives {expected}, torch gave {out_size}"
    entry = {"op": op, "C": module.in_channels, "M": module.out_channels}
    if op == "conv2d":
        entry["H"] = in_size[0]
    entry["W"] = in_size[-1]
    entry.update(
        kernel=list(module.kernel_size),
        stride=list(module.stride),
        padding=pads,
        dilation=list(module.dilation),
        groups=module.groups,
        bias=module.bias is not None,
    )
    if op == "conv2d":
        entry["H_out"] = out_size[0]
    entry["W_out"] = out_size[-1]
    entry["class"] = layer_class(op, module.in_channels, module.kernel_size, module.groups, module.dilation)
    entry["strided"] = max(module.stride) > 1
    entry["small_spatial"] = out_size[0] * (out_size[1] if op == "conv2d" else 1) <= SMALL_SPATIAL
    entry["paths"] = [path]
    return entry


def walk(name: str, model: nn.Module, shape: tuple) -> list[dict]:
    """Every conv call of one forward pass of ``model`` on zeros of ``shape``, in call order."""
    seen: list[dict] = []
    paths = {module: path for path, module in model.named_modules()}
    hooks = [
        m.register_forward_hook(lambda m, args, y: seen.append(_record(m, f"{name}:{paths[m]}", args[0], y)))
        for m in model.modules()
        if isinstance(m, (nn.Conv1d, nn.Conv2d))
    ]
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(shape))
    finally:
        for hook in hooks:
            hook.remove()
    return seen


_KEY = ("op", "C", "M", "H", "W", "kernel", "stride", "padding", "dilation", "groups", "bias")


def _key(entry: dict) -> tuple:
    """What makes two occurrences the same layer, hashable and ordered: 1-D first, then channels, size,
    geometry (H is 0 for 1-D)."""

    def freeze(value):
        return tuple(map(freeze, value)) if isinstance(value, list) else value

    return tuple(freeze(entry.get(k, 0)) for k in _KEY)


def build() -> dict:
    """The whole zoo document."""
    torch.manual_seed(0)
    # inception_v3 and googlenet warn that their default initialisation will change: weights are never used.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchvision\.models\.")
    networks, occurrences = {}, []
    for name, shape in TORCHVISION.items():
        model = getattr(torchvision.models, name)(weights=None)
        networks[name] = {"input": list(shape), "source": f"torchvision.models.{name}(weights=None), eval mode"}
        occurrences += walk(name, model, shape)
    for name, (cls, shape) in PAPERS.items():
        networks[name] = {"input": list(shape), "source": " ".join(cls.__doc__.split("\n\n")[0].split())}
        occurrences += walk(name, cls(), shape)
    order = list(networks)
    layers: dict[tuple, dict] = {}
    for entry in occurrences:
        kept = layers.setdefault(_key(entry), {**entry, "paths": []})
        kept["paths"] += entry["paths"]
    for entry in layers.values():
        nets = {p.partition(":")[0] for p in entry["paths"]}
        entry["networks"] = [n for n in order if n in nets]
        entry["count"] = len(entry["paths"])
        entry["paths"] = entry.pop("paths")  # after "networks": the short fields first
    return {
        "about": (
            "The distinct convolution layers of real networks at their standard input, batch 1 "
            "(layouts NCW / NCHW; weights (M, C/groups, K[, K])). One entry per distinct geometry, "
            "with the networks, module paths ('net:path', one per occurrence) and occurrence count. "
            "padding is per side, [[top, bottom], [left, right]] (1-D: [[left, right]]). "
            "Generated from model definitions; do not edit by hand."
        ),
        "generated_by": "tools/make_zoo.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "networks": networks,
        "layers": sorted(layers.values(), key=_key),
    }


def render(doc: dict) -> str:
    """The file's text: one network and one layer per line, so a regenerated file diffs line by line."""

    def dump(value) -> str:
        return json.dumps(value, allow_nan=False)

    fields = [f" {dump(k)}: {dump(v)}" for k, v in doc.items() if k not in ("networks", "layers")]
    networks = ",\n".join(f"  {dump(k)}: {dump(v)}" for k, v in doc["networks"].items())
    layers = ",\n".join(f"  {dump(e)}" for e in doc["layers"])
    fields += [f' "networks": {{\n{networks}\n }}', f' "layers": [\n{layers}\n ]']
    text = "{\n" + ",\n".join(fields) + "\n}\n"
    assert json.loads(text) == doc
    return text


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, fsync, os.replace."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make the shipped file private to its writer
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summary(doc: dict) -> str:
    """Distinct layers per network and per class, as text."""
    lines = [f"{len(doc['layers'])} distinct layers ({sum(e['count'] for e in doc['layers'])} occurrences)"]
    lines.append("per network (distinct / occurrences):")
    for net in doc["networks"]:
        mine = [e for e in doc["layers"] if net in e["networks"]]
        occurrences = sum(p.partition(":")[0] == net for e in mine for p in e["paths"])
        lines.append(f"  {net:20s} {len(mine):4d} / {occurrences:4d}")
    lines.append("per class (distinct):")
    classes: dict[str, int] = {}
    for e in doc["layers"]:
        classes[e["class"]] = classes.get(e["class"], 0) + 1
    lines += [f"  {c:20s} {n:4d}" for c, n in sorted(classes.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default: {OUT.relative_to(ROOT)})")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    if args.check and not args.out.is_file():
        parser.error(f"--check: {args.out} does not exist")
    if not args.check and not (args.out.parent.is_dir() and os.access(args.out.parent, os.W_OK)):
        parser.error(f"--out: folder {args.out.parent} does not exist or is not writable")
    doc = build()
    text = render(doc)
    if args.check:
        if args.out.read_bytes() != text.encode("utf-8"):
            print(f"{args.out} differs from what tools/make_zoo.py generates: regenerate it", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
    else:
        write_atomically(args.out, text)
        print(f"wrote {args.out}")
    print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
