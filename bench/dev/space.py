"""The variant space of family `mma` (mirrors docs/kernels.md and the C
enumeration in src/kernels). A variant is (block_m, block_n, warps, stages,
layout, q_in_regs)."""

SMEM_OPTIN = 227 * 1024  # H100/H200 opt-in limit per block


def smem_bytes(bm, bn, hdim, stages, layout):
    row = hdim + (8 if layout == 0 else 0)
    return 2 * row * (bm + 2 * stages * bn)


def legal(v, hdim, smem_limit=SMEM_OPTIN):
    bm, bn, w, st, lay, qr = v
    if bm % (16 * w) or bm // (16 * w) not in (1, 2):
        return False
    if bn % 16 or not 16 <= bn <= 256 or not 1 <= st <= 4:
        return False
    mt = bm // (16 * w)
    if mt * (bn + hdim) // 2 + (mt * hdim // 4 if qr else 0) > 256:
        return False
    return smem_bytes(bm, bn, hdim, st, lay) <= smem_limit


def variants(hdim):
    """Candidates before the compile report prunes spills."""
    out = []
    for bm, w in ((64, 4), (128, 4), (128, 8)):
        for bn in (32, 64, 128):
            for st in (1, 2, 3):
                for lay in (0, 1):
                    for qr in (0, 1):
                        v = (bm, bn, w, st, lay, qr)
                        if legal(v, hdim):
                            out.append(v)
    return out


def round1(hdim):
    """First device sweep: every shape knob with swizzle, pad only at 2 stages."""
    return [v for v in variants(hdim) if v[4] == 1 or (v[3] == 2 and v[5] == 0)]


def round2(hdim):
    """Second sweep: 256-row blocks and block_n 48/80/96 next to round 1's
    winners; swizzle, Q from shared memory, 1-2 stages (round 1: Q in
    registers and 3 stages never won by more than noise)."""
    shapes = [(128, 4), (128, 8), (256, 8)] + ([(64, 4)] if hdim == 256 else [])
    out = []
    for bm, w in shapes:
        for bn in (32, 48, 64, 80, 96, 128):
            for st in (1, 2):
                v = (bm, bn, w, st, 1, 0)
                if legal(v, hdim):
                    out.append(v)
    return out


def final(hdim):
    """The tuned space of the benchmark (docs/kernels.md): 64/128-row blocks
    at 4 or 8 warps, block_n 32/64/128, 1-2 stages, swizzle, Q re-read from
    shared memory; the legality rules and ptxas' spill report prune it."""
    out = []
    for bm, w in ((64, 4), (128, 4), (128, 8)):
        for bn in (32, 64, 128):
            for st in (1, 2):
                v = (bm, bn, w, st, 1, 0)
                if legal(v, hdim):
                    out.append(v)
    return out
