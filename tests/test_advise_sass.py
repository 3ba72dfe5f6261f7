"""The SASS structure reader (loops, modifiers, special registers) and the ELF attribute reader, on literal text."""

from __future__ import annotations

from gemm_ladder.advise.sass_structure import Control, elf_ints, parse_elf_attributes, parse_sass

#: A K loop around HGMMA, a store after it, an EXIT, then an mbarrier retry stub after the last EXIT that
#: branches back into the body (as ptxas lays them out): the stub must not count as a loop of the kernel.
SASS = """
\t\tFunction : k
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   S2UR UR4, SR_CTAID.X ;
        /*0020*/                   SYNCS.EXCH.64 URZ, [UR4], UR6 ;
        /*0030*/              @!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0050*/                   UTMALDG.2D.MULTICAST [UR8], [UR10], UR12 ;
        /*0060*/               @P1 BRA 0x30 ;
        /*0070*/                   UTMASTG.2D [UR4], [UR6] ;
        /*0080*/                   USETMAXREG.DEALLOC.CTAPOOL 0x28 ;
        /*0090*/                   EXIT ;
        /*00a0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*00b0*/              @!P0 BRA 0xa0 ;
        /*00c0*/                   BRA 0x0 ;
        /*00d0*/                   NOP;
"""


def test_parse_sass_reads_modifiers_special_registers_and_loops():
    s = parse_sass(SASS)["k"]
    assert s.count("HGMMA") == 1 and s.count("UTMALDG") == 1 and s.count("UTMALDG", "MULTICAST") == 1
    assert s.count("SYNCS", "EXCH") == 1 and s.count("SYNCS", "PHASECHK") == 2
    assert s.count("USETMAXREG", "DEALLOC") == 1 and s.count("USETMAXREG", "TRY_ALLOC") == 0
    assert s.special_registers == {"SR_TID.X", "SR_CTAID.X"}
    assert s.body_end == 0x90
    assert s.loops == [(0x30, 0x60)]  # the stubs after the last EXIT (0xb0, 0xc0) are not the kernel's loops
    assert s.mma_in_loop and not s.store_in_mma_loop


def test_a_store_inside_the_mma_loop_is_a_tile_loop():
    text = SASS.replace("/*0060*/               @P1 BRA 0x30 ;", "/*0060*/                   NOP ;").replace(
        "/*0080*/                   USETMAXREG.DEALLOC.CTAPOOL 0x28 ;", "/*0080*/               @P2 BRA 0x40 ;")
    s = parse_sass(text)["k"]
    assert s.loops == [(0x40, 0x80)] and s.mma_in_loop and s.store_in_mma_loop


def test_issue_path_from_a_wait_to_the_committing_wgmma():
    s = parse_sass(SASS)["k"]
    assert [(p.wait, p.first_mma, p.last_mma, p.r2ur) for p in s.issue_paths] == [(0x30, 1, 1, 0)]
    text = """
\t\tFunction : k
        /*0000*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0010*/                   R2UR UR8, R4 ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0030*/                   R2UR UR8, R6 ;
        /*0040*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;
        /*0050*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0060*/                   NOP ;
        /*0070*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R88, gdesc[UR20], R88, gsb0 ;
        /*0080*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0090*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*00a0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*00b0*/                   EXIT ;
"""
    got = [(p.wait, p.first_mma, p.last_mma, p.r2ur) for p in parse_sass(text)["k"].issue_paths]
    # the third wait's group is not committed before the next wait: no path
    assert got == [(0x00, 2, 4, 2), (0x50, 2, 2, 0)]


def test_no_loop_at_all():
    text = "\t\tFunction : k\n        /*0000*/                   HGMMA.64x8x16.F32.BF16 R0, gdesc[UR4], RZ ;\n" \
           "        /*0010*/                   STG.E [R2.64], R0 ;\n        /*0020*/                   EXIT ;\n"
    s = parse_sass(text)["k"]
    assert s.loops == [] and not s.mma_in_loop and not s.store_in_mma_loop


ELF = """
.nv.info
\tAttribute:\tEIATTR_REGCOUNT
\tFormat:\tEIFMT_SVAL
\tValue:\tfunction: kc(0x8)\tregister count: 10
.nv.info.kc
\t<0x1>
\tAttribute:\tEIATTR_EXPLICIT_CLUSTER
\tFormat:\tEIFMT_NVAL
\t<0x2>
\tAttribute:\tEIATTR_CTA_PER_CLUSTER
\tFormat:\tEIFMT_SVAL
\tValue:\t0x2 0x1 0x1 
\tAttribute:\tEIATTR_MAX_THREADS
\tFormat:\tEIFMT_SVAL
\tValue:\t0x180 0x1 0x1 
.nv.callgraph
\tAttribute:\tEIATTR_NOT_MINE
"""


def test_parse_elf_attributes_per_function():
    attrs = parse_elf_attributes(ELF)
    assert set(attrs) == {"kc"}
    assert attrs["kc"]["EIATTR_EXPLICIT_CLUSTER"] == ""
    assert elf_ints(attrs["kc"]["EIATTR_CTA_PER_CLUSTER"]) == (2, 1, 1)
    assert elf_ints(attrs["kc"]["EIATTR_MAX_THREADS"]) == (384, 1, 1)
    assert "EIATTR_NOT_MINE" not in attrs["kc"]


#: Two promotion FFMAs as cuobjdump prints them (nvcc 13.0, sm_90a, the fp8 kernel's K loop): each line's
#: encoding, then the high word with its control bits on the line below.
CONTROL_SASS = """
\t\tFunction : k
        /*1d70*/                   FFMA.FTZ R210, R25, R157.reuse, R210 ;  /* 0x0000009d19d27223 */
                                                                           /* 0x080fe200000100d2 */
        /*1d80*/                   FFMA.FTZ R209, R28, R157, R209 ;        /* 0x0000009d1cd17223 */
                                                                           /* 0x000fc200000100d1 */
        /*1d90*/                   NOP ;
"""


def test_control_bits_decode_stall_yield_and_reuse():
    first, second, nop = parse_sass(CONTROL_SASS)["k"].instructions
    # The first keeps R157 (operand slot b) in the reuse cache and does not yield; the second yields and
    # keeps nothing: ptxas never sets a reuse flag on an instruction that yields.
    assert first.control == Control(stall=1, yields=False, write_barrier=7, read_barrier=7, wait_mask=0, reuse=2)
    assert second.control.yields and second.control.reuse == 0 and second.control.stall == 1
    assert nop.control is None  # no encoding printed


def test_decode_takes_each_field_from_its_bits():
    high = (3 << 41) | (0 << 45) | (2 << 46) | (5 << 49) | (0x21 << 52) | (0b1010 << 58)
    assert Control.decode(high) == Control(stall=3, yields=True, write_barrier=2, read_barrier=5, wait_mask=0x21,
                                           reuse=0b1010)
    assert not Control.decode(1 << 45).yields
