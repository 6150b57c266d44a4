"""The range analysis's transfer functions, one op family at a time, through the table ranges.py reads."""

import pytest

from tritonkit.check.analysis.intervals import Iv, Unknown
from tritonkit.check.ir.mlir import parse_module
from tritonkit.check.analysis.ranges import Bindings, RangeAnalysis
from tritonkit.check.analysis.transfer import TRANSFER, UNMODELLED

TTIR = """
module {
  tt.func public @k(%n: i32, %m: i32, %idx_ptr: !tt.ptr<i32>) {
    %c8 = arith.constant 8 : i32
    %c3 = arith.constant 3 : i32
    %pid = tt.get_program_id x : i32
    %rem = arith.remsi %n, %c8 : i32
    %and = arith.andi %n, %c3 : i32
    %shr = arith.shrsi %m, %c3 : i32
    %max = arith.maxsi %pid, %c3 : i32
    %min = arith.minsi %pid, %n : i32
    %fdiv = arith.floordivsi %m, %c8 : i32
    %prod = arith.muli %m, %c8 : i32
    %loaded = tt.load %idx_ptr : !tt.ptr<i32>
    %slot = arith.remsi %loaded, %c8 : i32
    %neg = arith.cmpi slt, %n, %c3 : i32
    %sel = arith.select %neg, %n, %c3 : i32
    %abs = math.absi %n : i32
    %odd = arith.ceildivui %m, %c8 : i32
    %back = arith.addi %abs, %c3 : i32
    %wide = arith.extsi %rem : i32 to i64
    %big = arith.constant 70000 : i32
    %narrow = arith.trunci %big : i32 to i16
    tt.return
  }
}
"""


@pytest.fixture(scope="module")
def values():
    f = parse_module(TTIR).entry_func()
    ra = RangeAnalysis(f, Bindings((4, 1, 1), {"n": (-100, 100), "m": (0, 1000)}, {"idx_ptr": (0, 50)})).run()
    return {name: ra.get(name) for name in f.defs}


@pytest.mark.parametrize(
    "name,expected",
    [
        ("rem", Iv(-7, 7)),  # a signed remainder keeps the dividend's sign, below the divisor
        ("and", Iv(0, 3)),  # masking with a constant bounds by it
        ("shr", Iv(0, 125)),
        ("max", Iv(3, 3)),
        ("min", Iv(-100, 3)),
        ("fdiv", Iv(-1, 126)),  # floor division: one of slack either side
        ("prod", Iv(0, 8000)),
        ("slot", Iv(0, 7)),  # the loaded values' declared bounds
        ("sel", Iv(-100, 3)),  # each side where the condition takes it: n < 3 or 3
        ("wide", Iv(-7, 7)),
    ],
)
def test_each_op_family_maps_its_operands_intervals(values, name, expected):
    assert values[name] == expected


def test_an_op_the_table_does_not_know_is_unknown_and_says_why(values):
    assert values["abs"] == Unknown("`math.absi` with an operand the analysis does not track")
    assert values["odd"] == Unknown("`arith.ceildivui` is not understood by the range analysis")
    assert values["back"] == values["abs"]  # an unknown operand is the answer, whatever the op
    assert values["narrow"].data and (values["narrow"].lo, values["narrow"].hi) == (-(2**15), 2**15 - 1)


def test_the_table_names_every_integer_op_the_analysis_models():
    arith = {
        "addi",
        "subi",
        "muli",
        "shli",
        "divsi",
        "divui",
        "ceildivsi",
        "floordivsi",
        "remsi",
        "remui",
        "maxsi",
        "maxui",
        "minsi",
        "minui",
        "andi",
        "ori",
        "xori",
        "shrsi",
        "shrui",
        "select",
        "trunci",
        "extsi",
        "extui",
        "constant",
        "index_cast",
    }
    assert {f"arith.{n}" for n in arith} <= set(TRANSFER)
    assert "arith.ceildivui" not in TRANSFER and UNMODELLED not in TRANSFER.values()
