"""The tail queue (tail-queue.diff applied, TILETUNE_SPLITKV_TAILQ=P:T)
against float64, per sequence: units filling 90-100% of a wave of the
default 16x128 tile, per-sequence lengths (empty, one key, full),
contiguous and paged, three calls each (the queue's counters go back to
zero). Run from the root with libtiletune and the package on the paths."""
import math
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tests", "gpu"))
import torch  # noqa: E402
import test_inference_gpu as T  # noqa: E402
import tiletune  # noqa: E402

torch.manual_seed(7)
dt = torch.bfloat16
for (B, Hq, Hkv, Lmax, page) in ((16, 32, 8, 2048, 0), (33, 16, 4, 3000, 0), (16, 32, 8, 2048, 64)):
    lens = [(b * 977) % (Lmax + 1) for b in range(B)]
    lens[1], lens[2], lens[3] = Lmax, 0, 1
    q = T.rnd(B, 1, Hq, 128, dtype=dt)
    kc = T.rnd(B, Lmax, Hkv, 128, dtype=dt)
    vc = T.rnd(B, Lmax, Hkv, 128, dtype=dt)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=T.DEV)
    sc = 1.0 / math.sqrt(128)
    refs = {True: [T.ref_seq(q[b], kc[b, :lens[b]], vc[b, :lens[b]], 0, sc) for b in range(B)],
            False: [T.ref_seq(q[b], kc[b], vc[b], 0, sc) for b in range(B)]}
    args, table = (kc, vc), None
    if page:
        npg = Lmax // page
        perm = torch.randperm(B * npg, device=T.DEV)
        table = perm.view(B, npg).to(torch.int32)
        kp = torch.empty(B * npg, page, Hkv, 128, device=T.DEV, dtype=dt)
        vp = torch.empty_like(kp)
        kp[perm] = kc[:, :npg * page].reshape(B * npg, page, Hkv, 128)
        vp[perm] = vc[:, :npg * page].reshape(B * npg, page, Hkv, 128)
        args = (kp, vp)
    for with_lens in (True, False):
        if page and not with_lens:
            continue
        for rep in range(3):
            name = f"tailq B{B} Hq{Hq}/{Hkv} Lk{Lmax} page{page} lens{with_lens} call{rep}"
            try:
                o, lse = tiletune.flash_attn_with_kvcache(q, *args, cache_seqlens=seqlens if with_lens else None,
                                                          block_table=table, return_softmax_lse=True)
            except Exception as e:  # noqa: BLE001
                T.FAILS.append(f"{name}: raised {e}")
                continue
            for b in range(B):
                ro, rl = refs[with_lens][b]
                T.check(f"{name} seq{b}", o[b], lse[b], ro, rl, dt)
for f in T.FAILS[:20]:
    print("FAIL", f)
print(f"TAILQ={os.environ.get('TILETUNE_SPLITKV_TAILQ')}: {T.CHECKS[0]} checks, {len(T.FAILS)} failures")
