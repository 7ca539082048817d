"""What a compiled Triton kernel's text says about its run on an sm_90 GPU, without one: the
theoretical occupancy (CUDA's occupancy arithmetic for compute capability 9.0), waves of
programs over the SMs, the widths of its global loads and stores (PTX), how many load
sites of the kernel read each pointer argument (TTGIR), and how many machine instructions a
warp issues (SASS) with the time that many take at one a clock per warp scheduler. Pure
functions of numbers and text; tools/panel_reasons.py feeds them the compiler's output.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

# Compute capability 9.0 (H100/H200): the limits the occupancy calculator uses.
SM90_REGS = 65536  # 32-bit registers an SM
SM90_MAX_WARPS = 64  # resident warps an SM
SM90_MAX_BLOCKS = 32  # resident blocks an SM
SM90_SMEM = 228 * 1024  # shared memory an SM (the largest carveout)
SM90_SMEM_RESERVED = 1024  # the runtime's shared memory a block, sm_80 on
REG_UNIT = 256  # registers are allocated a warp at a time, in units of 256
SMEM_UNIT = 128
H200_SMS = 132
H200_CLOCK_HZ = 1.98e9  # the SXM part's boost clock
SCHEDULERS = 4  # warp schedulers an SM, each issuing at most one instruction a clock


@dataclass(frozen=True)
class Occupancy:
    blocks: int  # resident blocks an SM
    warps: int  # resident warps an SM (of SM90_MAX_WARPS)
    limit: str  # what bounds `blocks`: "registers", "warps", "shared memory" or "blocks"

    @property
    def fraction(self) -> float:
        return self.warps / SM90_MAX_WARPS


def occupancy(regs: int, warps: int, smem: int) -> Occupancy:
    """Resident blocks and warps an sm_90 SM holds of a kernel with `regs` registers a thread,
    `warps` warps a block and `smem` bytes of shared memory a block. `limit` names what bounds
    it, the hardware's warp or block limit where the kernel's resources allow as many."""
    if regs < 1 or warps < 1 or smem < 0:
        raise ValueError(f"bad kernel resources: {regs} registers, {warps} warps, {smem} B")
    regs_per_warp = math.ceil(regs * 32 / REG_UNIT) * REG_UNIT
    by = {  # the hardware's own limits first: a tie names them, not the kernel's resources
        "warps": SM90_MAX_WARPS // warps,
        "blocks": SM90_MAX_BLOCKS,
        "registers": (SM90_REGS // regs_per_warp) // warps,
        "shared memory": SM90_SMEM // (math.ceil(smem / SMEM_UNIT) * SMEM_UNIT
                                       + SM90_SMEM_RESERVED),
    }
    limit = min(by, key=lambda k: by[k])  # dicts keep order: ties name the first
    return Occupancy(by[limit], by[limit] * warps, limit)


def waves(programs: int, blocks_per_sm: int, sms: int = H200_SMS) -> float:
    """Programs over the blocks all SMs hold at once (1.0: one full wave)."""
    return programs / (blocks_per_sm * sms) if blocks_per_sm else math.inf


def bytes_between_passes(config: tuple[int, ...], blocks_per_sm: int, n_rows: int,
                          row_bytes: int, sms: int = H200_SMS) -> int:
    """Bytes a two-pass kernel reads between a row's first read and its second, when all
    resident programs advance together: the rows in flight, (resident programs x rows a
    program) x `row_bytes`. `config` is a row's `user_config`: (block, rows a program,
    warps[, programs a row[, 1: in one launch]]). A split row (programs a row > 1) read by
    two kernels, the partials then the finish, has all of the input between its two reads;
    in one launch (the joined kernel) the programs in flight read their chunks twice."""
    if len(config) > 3 and config[3] > 1:
        if config[4:] != (1,):
            return n_rows * row_bytes
        chunks = n_rows * config[3]  # one launch: a program a chunk
        return min(chunks, blocks_per_sm * sms) * (row_bytes // config[3])
    programs = -(-n_rows // config[1])
    return min(programs, blocks_per_sm * sms) * config[1] * row_bytes


_ACCESS = re.compile(r"\b(ld|st)\.global((?:\.[A-Za-z0-9_:]+)+)")


def global_accesses(ptx: str) -> dict[str, Counter]:
    """Static counts of PTX global loads and stores by bytes an instruction moves a thread
    ("ld": {16: 3, 2: 1} is three 16-byte and one 2-byte load instruction in the text; a
    load inside a loop counts once)."""
    out: dict[str, Counter] = {"ld": Counter(), "st": Counter()}
    for kind, suffixes in _ACCESS.findall(ptx):
        parts = suffixes.strip(".").split(".")
        vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
        bits = next((int(p[1:]) for p in reversed(parts) if re.fullmatch(r"[bsuf]\d+", p)), 0)
        out[kind][vec * bits // 8] += 1
    return out


def widths_text(counts: Counter) -> str:
    """`4x16B 1x2B` (widest first) or `-`."""
    return " ".join(f"{n}x{w}B" for w, n in sorted(counts.items(), reverse=True)) or "-"


_FUNC = re.compile(r"tt\.func\s+(?:public\s+)?@\w+\((.*?)\)\s*(?:attributes|\{)", re.S)
_DEF = re.compile(r"^\s*(%[\w#]+)(?::\d+)?\s*=\s*([\w.]+)\s*(.*)$")
_FOLLOW = ("tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "ttg.convert_layout",
           "tt.reshape", "arith.select")
_ITER = re.compile(r"(%[\w#]+)\s*=\s*(%[\w#]+)")


def load_sites(ttgir: str) -> dict[int, list[int]]:
    """For each pointer argument (by position) the loop depth of every `tt.load` reading it
    (0: straight-line code). Follows each load's pointer back through address arithmetic,
    layout conversions and loop-carried values to a function argument; loads it cannot
    follow are left out."""
    func = _FUNC.search(ttgir)
    if func is None:
        return {}
    params = re.findall(r"(%[\w#]+)\s*:", func.group(1))  # named (3.9) or %argN (3.6)
    defs: dict[str, list[str]] = {}
    loads: list[tuple[str, int]] = []
    opened: list[bool] = []  # the regions open at this line: True for a loop's
    for line in ttgir[func.end():].splitlines():
        text = line.strip()
        if text.startswith("}") and opened:
            opened.pop()
        if "scf.for" in text:
            carried_part = text.split("iter_args(", 1)[1] if "iter_args(" in text else ""
            for carried, init in _ITER.findall(carried_part):
                defs[carried] = [init]
        m = _DEF.match(line)
        if m:
            name, op, rest = m.groups()
            operands = re.findall(r"%[\w#]+", rest.split(" : ")[0])
            if op == "tt.load" and operands:
                loads.append((operands[0], sum(opened)))
            elif op in _FOLLOW:
                defs[name] = operands[1:2] if op == "arith.select" else operands[:1]
        if text.endswith("{"):
            opened.append("scf.for" in text or "scf.while" in text)

    def root(name: str, seen: int = 0) -> int | None:
        if name in params:
            return params.index(name)
        if name not in defs or seen > 64:
            return None
        return root(defs[name][0], seen + 1) if defs[name] else None

    out: dict[int, list[int]] = {}
    for ptr, d in loads:
        arg = root(ptr)
        if arg is not None:
            out.setdefault(arg, []).append(d)
    return out


# A SASS line as cuobjdump prints it: `/*0120*/  @P0 BRA 0x1a0 ;  /* 0x... */`.
_SASS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


@dataclass(frozen=True)
class SassCount:
    instructions: int  # in the text, NOP padding left out
    looped: bool  # a branch goes back: some run more than once, and the count is a floor
    branches: int  # forward branches: a warp may skip what one jumps over


def sass_count(sass: str) -> SassCount:
    """Instructions of one kernel's SASS (`cuobjdump -sass`). Without branches every warp
    issues each once; a forward branch may skip some (the count is then at most what a warp
    issues), a backward one repeats some (at least). The self-branch after EXIT is padding."""
    count, looped, branches = 0, False, 0
    for line in sass.splitlines():
        m = _SASS.match(line)
        if m is None or m.group(3) == "NOP":
            continue
        address, op, operands = int(m.group(1), 16), m.group(3), m.group(4)
        if op.startswith("BRA"):
            target = re.search(r"0x([0-9a-f]+)", operands)
            if target and int(target.group(1), 16) == address:
                continue  # `BRA` to itself: the trap after the kernel's end
            back = bool(target) and int(target.group(1), 16) < address
            looped |= back
            branches += not back
        count += 1
    return SassCount(count, looped, branches)


def issue_floor_us(instructions: int, warps: int, programs: int, sms: int = H200_SMS,
                   clock_hz: float = H200_CLOCK_HZ) -> float:
    """The shortest time `programs` programs of `warps` warps, each warp issuing
    `instructions`, can take when every scheduler of every SM issues one a clock: a kernel
    near it is bound by instruction issue, not by memory."""
    return instructions * warps * programs / (sms * SCHEDULERS * clock_hz) * 1e6
