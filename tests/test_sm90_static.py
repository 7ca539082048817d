"""tools/sm90_static.py: sm_90 occupancy arithmetic, waves, PTX access widths and TTGIR load
sites, on numbers and text written here (no compiler needed)."""

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from sm90_static import (  # noqa: E402
    bytes_between_passes,
    global_accesses,
    load_sites,
    occupancy,
    waves,
    widths_text,
)


@pytest.mark.parametrize(("regs", "warps", "smem", "blocks", "limit"), [
    # 104 registers round to 3328 a warp: 19 warps' worth of registers, one 16-warp block
    (104, 16, 64, 1, "registers"),
    # 64 registers: 32 warps' worth, two 16-warp blocks
    (64, 16, 0, 2, "registers"),
    # 32 registers allow all 64 warps: the warp limit is named
    (32, 8, 32, 8, "warps"),
    (32, 4, 0, 16, "warps"),
    # 4 warps at 16 registers: registers allow 32 blocks, warps 16
    (16, 4, 0, 16, "warps"),
    # one warp a block: the 32-block limit
    (16, 1, 0, 32, "blocks"),
    # 100 KB of shared memory a block (+1 KB reserved): two blocks of 228 KB
    (32, 4, 100 * 1024, 2, "shared memory"),
    # 255 registers a thread: 8160 a warp rounds to 8192, 8 warps' worth
    (255, 8, 0, 1, "registers"),
    (255, 16, 0, 0, "registers"),
])
def test_occupancy_matches_the_sm90_limits(regs, warps, smem, blocks, limit):
    occ = occupancy(regs, warps, smem)
    assert (occ.blocks, occ.limit) == (blocks, limit)
    assert occ.warps == blocks * warps
    assert occ.fraction == blocks * warps / 64


def test_register_rounding_is_per_warp_in_units_of_256():
    # 40 registers: 1280 a warp, 51 warps' worth -> 6 blocks of 8 warps; 41 rounds to 1536
    # (42 warps' worth) -> 5 blocks
    assert occupancy(40, 8, 0).blocks == 6
    assert occupancy(41, 8, 0).blocks == 5


def test_bad_resources_are_refused():
    with pytest.raises(ValueError):
        occupancy(0, 4, 0)


def test_waves_over_132_sms():
    assert waves(2048, 1) == pytest.approx(2048 / 132)
    assert waves(264, 2) == 1.0
    assert waves(10, 0) == float("inf")


PTX = """
	@%p1 ld.global.L1::evict_last.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
	@%p1 ld.global.v4.b32 { %r5, %r6, %r7, %r8 }, [ %rd2 + 0 ];
	@%p2 ld.global.v2.b32 { %r9, %r10 }, [ %rd3 + 0 ];
	ld.global.b16 %rs1, [ %rd4 + 0 ];
	ld.shared.v4.b32 { %r1, %r2, %r3, %r4 }, [ %r11 + 0 ];
	@%p1 st.global.v4.b32 [ %rd5 + 0 ], { %r1, %r2, %r3, %r4 };
"""


def test_bytes_between_passes_are_the_rows_in_flight():
    # 2 resident blocks of one row on 132 SMs: 264 of 2048 rows in flight, 201 KB each
    assert bytes_between_passes((8192, 1, 16, 1), 2, 2048, 50304 * 4) == 264 * 50304 * 4
    # fewer rows than resident slots: every row is in flight (256 of 264)
    assert bytes_between_passes((4096, 1, 16, 1), 2, 256, 65536 * 4) == 256 * 65536 * 4
    # two rows a program: 4 blocks x 132 SMs x 2 rows
    assert bytes_between_passes((4096, 2, 8), 4, 4096, 4096 * 4) == 1056 * 4096 * 4


def test_a_split_row_has_the_whole_input_between_its_two_kernels():
    # 16 programs a row: the partials kernel reads all 128 rows before the finish kernel
    assert bytes_between_passes((2048, 1, 8, 16), 4, 128, 65536 * 4) == 128 * 65536 * 4


def test_a_row_split_in_one_launch_has_the_chunks_in_flight_between_its_reads():
    # 8 programs a row in one launch, 2 resident a SM: 264 of 2048 chunks of 32 KiB
    assert bytes_between_passes((8192, 1, 8, 8, 1), 2, 256, 65536 * 4) == 264 * 8192 * 4


def test_global_access_widths_count_bytes_a_thread_and_skip_shared():
    acc = global_accesses(PTX)
    assert acc["ld"] == Counter({16: 2, 8: 1, 2: 1})
    assert acc["st"] == Counter({16: 1})
    assert widths_text(acc["ld"]) == "2x16B 1x8B 1x2B"
    assert widths_text(Counter()) == "-"


# Shaped like Triton 3.9's TTGIR (named values): x read in a loop twice, w once outside.
TTGIR = """
  tt.func public @k(%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc("x"(#loc)),
    %w_ptr: !tt.ptr<f32> loc("w"(#loc)), %n: i32 loc("n"(#loc))) attributes {noinline = false} {
    %0 = tt.splat %x_ptr : !tt.ptr<f32> -> PTR loc(#loc1)
    %w = tt.splat %w_ptr : !tt.ptr<f32> -> PTR loc(#loc1)
    %w_1 = tt.addptr %w, %cols : PTR, I32 loc(#loc2)
    %w_2 = tt.load %w_1 : PTR loc(#loc3)
    %acc:2 = scf.for %i = %c0 to %n step %c1024 iter_args(%p = %0, %s = %cst) -> (PTR, f32) : i32 {
      %v = tt.load %p : PTR loc(#loc4)
      %r = "tt.reduce"(%v) <{axis = 0 : i32}> ({
      ^bb0(%a: f32, %b: f32):
        %t = arith.addf %a, %b : f32 loc(#loc5)
        tt.reduce.return %t : f32 loc(#loc5)
      }) : (tensor<1024xf32, #blocked>) -> f32 loc(#loc5)
      %p2 = tt.addptr %p, %step : PTR, I32 loc(#loc6)
      scf.yield %p2, %r : PTR, f32 loc(#loc7)
    } loc(#loc8)
    scf.for %j = %c0 to %n step %c1024  : i32 {
      %q = tt.addptr %0, %offs : PTR, I32 loc(#loc9)
      %v2 = tt.load %q : PTR loc(#loc10)
    } loc(#loc11)
    %v3 = tt.load %unknown : PTR loc(#loc12)
    tt.return loc(#loc13)
  } loc(#loc)
""".replace("PTR", "tensor<1024x!tt.ptr<f32>, #blocked>").replace(
    "I32", "tensor<1024xi32, #blocked>")


def test_load_sites_follow_pointers_to_arguments_and_count_loop_depth():
    # x (argument 0): two loads, each inside one loop (one through a loop-carried pointer);
    # w (argument 1): one load in straight-line code; the untraceable load is left out
    assert load_sites(TTGIR) == {0: [1, 1], 1: [0]}


def test_load_sites_of_text_without_a_function_is_empty():
    assert load_sites("module {}") == {}


# SASS as cuobjdump prints it (shortened): a straight-line kernel, then one with a loop.
STRAIGHT = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_CTAID.X ;                   /* 0x0000000000007919 */
        /*0020*/              @!P0 BRA 0x60 ;                             /* 0x0000000000008947 */
        /*0030*/                   FFMA R2, R0, 0.5, R1 ;                 /* 0x3f00000000027823 */
        /*0040*/                   NOP ;                                  /* 0x0000000000007918 */
        /*0050*/                   MUFU.EX2 R3, R2 ;                      /* 0x0000000200037308 */
        /*0060*/                   EXIT ;                                 /* 0x000000000000794d */
        /*0070*/                   BRA 0x70;                              /* 0xfffffffc00fc7947 */
        /*0080*/                   NOP;                                   /* 0x0000000000007918 */
"""
LOOPED = STRAIGHT.replace("@!P0 BRA 0x60", "@P0 BRA 0x10")


def test_sass_count_leaves_out_nops_and_the_trap_after_exit():
    from sm90_static import sass_count

    count = sass_count(STRAIGHT)
    assert (count.instructions, count.looped) == (6, False)  # LDC S2R BRA FFMA MUFU EXIT
    assert count.branches == 1  # the forward one: a warp may skip the FFMA and MUFU


def test_a_backward_branch_marks_the_count_as_a_floor():
    from sm90_static import sass_count

    count = sass_count(LOOPED)
    assert (count.instructions, count.looped, count.branches) == (6, True, 0)


def test_issue_floor_is_warp_instructions_over_every_scheduler():
    from sm90_static import SCHEDULERS, issue_floor_us

    # 1000 instructions x 4 warps x 1056 programs over 132 SMs of 4 schedulers at 1 GHz:
    # 4.224e6 warp-instructions / 528 a clock = 8000 clocks = 8 us
    assert SCHEDULERS == 4
    assert issue_floor_us(1000, 4, 1056, sms=132, clock_hz=1e9) == pytest.approx(8.0)
    assert issue_floor_us(1000, 8, 1056, sms=132, clock_hz=1e9) == pytest.approx(16.0)
