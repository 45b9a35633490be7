"""The machine's features (read from fake /proc and sysfs contents), its key, and the distance between machines."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from convsuite import _machine
from convsuite._machine import Machine

XEON_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512vl

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: something else entirely
flags\t\t: fpu sse sse2
"""

GRAVITON_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve
CPU implementer\t: 0x41
"""


def _cache_folder(root, entries):
    """A fake ``cpu0/cache`` folder: one ``indexN`` per (level, type, size)."""
    for i, (level, kind, size) in enumerate(entries):
        folder = root / f"index{i}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    return root


def _xeon(tmp_path, **overrides):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(XEON_CPUINFO)
    caches = _cache_folder(
        tmp_path / "cache",
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1280K"), (3, "Unified", "48M")],
    )
    values = dict(
        blas="openblas SkylakeX", kernel_blas="scipy-openblas32", logical_cores=16, usable_cores=16, arch="x86_64"
    )
    return _machine.detect(cpuinfo, caches, **(values | overrides))


def test_features_of_a_16_core_xeon_from_fake_proc_and_sysfs(tmp_path):
    xeon = _xeon(tmp_path)
    assert xeon.model == "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"  # the first processor's entry
    assert (xeon.simd, xeon.simd_bits) == ("AVX-512", 512)
    assert xeon.l2_bytes == 1280 * 2**10 and xeon.l3_bytes == 48 * 2**20  # the instruction cache is not counted
    assert (xeon.logical_cores, xeon.usable_cores, xeon.blas) == (16, 16, "openblas SkylakeX")
    assert xeon.describe() == "16-core AVX-512 machine (Intel Xeon Gold 6338)"


def test_arm_features_and_a_machine_without_proc_or_sysfs(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(GRAVITON_CPUINFO)
    arm = _machine.detect(cpuinfo, tmp_path / "none", blas="openblas NEOVERSEV1", arch="aarch64")
    assert (arm.simd, arm.simd_bits) == ("SVE", 128) and arm.l2_bytes is None
    cpuinfo.write_text(GRAVITON_CPUINFO.replace(" sve", ""))
    assert _machine.detect(cpuinfo, tmp_path / "none", blas="x").simd == "NEON"
    bare = _machine.detect(tmp_path / "no-cpuinfo", tmp_path / "no-cache", blas="unknown")
    assert (bare.simd, bare.simd_bits, bare.l2_bytes, bare.l3_bytes) == ("none", 0, None, None)
    assert bare.model  # the platform's name, never empty


@pytest.mark.parametrize(
    "text, size", [("48K", 48 * 1024), ("1024K\n", 2**20), ("32M", 32 * 2**20), ("1G", 2**30), ("512", 512)]
)
def test_cache_sizes_in_every_sysfs_spelling(text, size):
    assert _machine.parse_size(text) == size


def test_unreadable_cache_entries_are_skipped(tmp_path):
    root = _cache_folder(tmp_path / "cache", [(2, "Unified", "garbage"), (3, "Unified", "16M")])
    (root / "index2").mkdir()  # a folder without its files
    assert _machine.cache_sizes(root) == {3: 16 * 2**20}


def test_the_key_names_the_hardware_and_survives_a_round_trip(tmp_path):
    xeon = _xeon(tmp_path)
    assert xeon.key().startswith("x86_64-16c-avx512-") and xeon.key() == _xeon(tmp_path).key()
    assert dataclasses.replace(xeon, usable_cores=4).key() == xeon.key()  # a taskset is not another machine
    assert dataclasses.replace(xeon, l3_bytes=32 * 2**20).key() != xeon.key()
    assert dataclasses.replace(xeon, kernel_blas="scipy").key() != xeon.key()
    data = xeon.to_dict()
    assert data["key"] == xeon.key() and Machine.from_dict(data) == xeon


@pytest.mark.parametrize(
    "change, message",
    [
        ({"logical_cores": "16"}, "'logical_cores' must be int"),
        ({"simd": None}, "'simd' must be str"),
        ({"usable_cores": 0}, "core counts must be >= 1"),
        ({"l2_bytes": True}, "'l2_bytes' must be int"),
    ],
)
def test_a_recorded_machine_of_the_wrong_shape_is_refused_naming_the_feature(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        Machine.from_dict(_xeon(tmp_path).to_dict() | change)
    data = _xeon(tmp_path).to_dict()
    del data["blas"]
    with pytest.raises(ValueError, match="no 'blas'"):
        Machine.from_dict(data)


def test_distance_between_machines(tmp_path):
    xeon = _xeon(tmp_path)
    vm = dataclasses.replace(
        xeon, logical_cores=2, usable_cores=2, model="AMD EPYC", l2_bytes=2**20, l3_bytes=32 * 2**20
    )
    assert _machine.distance(xeon, xeon) == 0.0
    assert _machine.distance(xeon, vm) == _machine.distance(vm, xeon)
    cores_only = dataclasses.replace(xeon, logical_cores=2, usable_cores=2)
    assert _machine.distance(xeon, cores_only) == pytest.approx(3.0)  # log2(16 / 2)
    eight = dataclasses.replace(xeon, logical_cores=8, usable_cores=8)
    assert _machine.distance(xeon, eight) < _machine.distance(xeon, cores_only)
    avx2 = dataclasses.replace(xeon, simd="AVX2", simd_bits=256)
    assert _machine.distance(xeon, avx2) == pytest.approx(1.0)
    arm = dataclasses.replace(xeon, arch="aarch64", simd="NEON", simd_bits=128, blas="openblas NEOVERSEV1")
    assert _machine.distance(xeon, arm) > _machine.distance(xeon, vm)
    unknown = dataclasses.replace(xeon, l2_bytes=None)
    assert _machine.distance(xeon, unknown) > 0 and _machine.distance(unknown, unknown) == 0.0
    assert xeon.differences(vm) == [
        "CPU AMD EPYC, here Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
        "usable cores 2, here 16",
        "L2 1 MiB, here 1.25 MiB",
        "L3 32 MiB, here 48 MiB",
    ]


def test_this_machine_is_read_once_and_again_in_a_forked_child(monkeypatch):
    calls = []
    real = _machine.detect

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(_machine, "detect", counting)
    _machine.reset()
    try:
        first = _machine.current()
        assert _machine.current() is first and len(calls) == 1
        assert _machine.machine_features()["threads"] >= 1
        if sys.platform.startswith("linux"):
            pid = os.fork()
            if pid == 0:  # the child: the parent's machine was forgotten at the fork
                os._exit(0 if _machine._current is None else 1)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
    finally:
        _machine.reset()
