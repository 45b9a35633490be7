"""The dW ladder without a GPU: its records' verdicts, auto's choice, and the SASS instruction mix."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends.cupy_backend import CupyBackend
from convsuite.bench import backward_ladder as bl

LADDER = bl.LADDER_STEPS


def _spec(x_shape, w_shape, **kw):
    return cs.explain(np.ones(x_shape, np.float32), np.ones(w_shape, np.float32), backend="numpy", **kw).spec


def test_ladder_records_are_backward_only_and_say_why():
    gpu = CupyBackend()
    table = gpu.algorithm_table()
    for name in LADDER:
        assert table[name].directions == ("backward",)
        assert "atomicAdd" in table[name].summary and "never chosen by auto" in table[name].summary
        assert "backward only" in gpu.can_run(_spec((2, 4, 9, 9), (8, 4, 3, 3), padding=1), name, "forward")
    same = _spec((2, 4, 9, 9), (8, 4, 3, 3), padding="same")
    assert all(gpu.can_run(same, name, "backward") is True for name in LADDER)
    strided = _spec((2, 4, 20, 20), (8, 4, 5, 5), stride=2, dilation=2)
    assert gpu.can_run(strided, "wgrad_registers", "backward") is True
    assert "stride 1 and dilation 1" in gpu.can_run(strided, "wgrad_padded", "backward")
    wide = _spec((2, 4, 20, 20), (8, 4, 3, 5))
    assert gpu.can_run(wide, "wgrad_atomic", "backward") is True
    for name in ("wgrad_registers", "wgrad_padded"):
        verdict = gpu.can_run(wide, name, "backward")
        assert "square kernels 1x1, 3x3, 5x5, 7x7" in verdict and "3x5" in verdict
    assert "2-D" in gpu.can_run(_spec((2, 4, 30), (8, 4, 3)), "wgrad_atomic", "backward")


@pytest.mark.parametrize("workload", ["cnn-train-3x3", "ece408-fa19", "ece408-fa21"])
def test_auto_never_picks_the_ladder(workload):
    gpu = CupyBackend()
    for layer in bl.seed_workloads()[workload]["layers"]:
        spec = _spec((8, layer["C"], layer["H"], layer["W"]), (layer["M"], layer["C"], layer["K"], layer["K"]))
        assert gpu.choose_algorithm(spec, "backward")[0] not in LADDER


SASS = """
        Function : _Z6kernelIfLi3EEvPKT_
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   FFMA R2, R3, R4, R2 ;
        /*0020*/                   LDG.E R3, desc[UR4][R6.64] ;
        /*0030*/                   FFMA R2, R3, R4, R2 ;
        /*0040*/                   FFMA R5, R3, R4, R5 ;
        /*0050*/               @P0 BRA 0x20 ;
        /*0060*/                   DFMA R8, R10, R12, R8 ;
        /*0070*/                   NOP ;
        /*0080*/              @!P1 BRA 0x60 ;
        /*0090*/                   EXIT ;
"""


def test_sass_parser_finds_the_main_loop():
    functions = bl._functions(SASS)
    assert list(functions) == ["_Z6kernelIfLi3EEvPKT_"]
    code = functions["_Z6kernelIfLi3EEvPKT_"]
    assert [op.split()[0] for _, op, _ in code][:3] == ["LDC", "FFMA", "LDG.E"]
    mix = bl.loop_mix(code, "float32")
    # two loops: 0x20..0x50 (2 FFMA of 4 instructions) and 0x60..0x80 (no FFMA; the NOP not counted)
    assert mix["loops"] == 2
    assert (mix["loop_instructions"], mix["loop_fma"]) == (4, 2)
    assert mix["kernel_instructions"] == 9 and mix["kernel_fma_share"] == pytest.approx(3 / 9)
    assert bl.loop_mix(code, "float64")["loop_fma"] == 1  # DFMA loop for double
    assert bl._mangled_match("_Z22wgrad_ladder_registersIfLi3EEvPKT_", "wgrad_ladder_registers", ["3"])
    assert not bl._mangled_match("_Z22wgrad_ladder_registersIfLi5EEvPKT_", "wgrad_ladder_registers", ["3"])


@pytest.mark.skipif(
    shutil.which("nvcc") is None or bl._tool("cuobjdump") is None,
    reason="nvcc and cuobjdump (pip install '.[sass]') not found: SASS not read",
)
def test_instruction_mix_of_the_ladder_rises_step_by_step():
    rows = {(r["algorithm"], r["kernel"]): r for r in bl.instruction_mix((3,), files=("wgrad_ladder.cu",))}
    share = [
        rows[(name, k)]["loop_fma_share"]
        for name, k in [
            ("wgrad_atomic", "wgrad_ladder_atomic<float>"),
            ("wgrad_registers", "wgrad_ladder_registers<float, 3>"),
            ("wgrad_padded", "wgrad_ladder_padded<float, 3>"),
        ]
    ]
    assert 0 < share[0] < share[2] and share[1] < share[2]
    padded = rows[("wgrad_padded", "wgrad_ladder_padded<float, 3>")]
    assert padded["loop_fma"] >= 9 * 4  # every tap of every row of the yBatch in the loop body


def test_compare_hook_only_for_the_ladder_workloads(capsys):
    bl.print_ablation("conv1d-signal")  # not a ladder workload: nothing to time, nothing printed
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit):
        bl.main([])  # neither --sass nor --time
    assert "--sass and/or --time" in capsys.readouterr().err
