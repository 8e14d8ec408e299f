import math, sys, torch, tiletune
sys.path.insert(0, "tests/gpu")
cfgs = sys.argv[1:]
torch.manual_seed(3)
bad = 0; n = 0
for (B, Lq, Lk) in ((3, 1, 20000), (16, 1, 4096), (1, 2, 70000), (2, 5, 9000)):
    q = torch.randn(B, Lq, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Lk, 8, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lens = torch.tensor([Lk - 37 * b for b in range(B)], dtype=torch.int32, device="cuda")
    for causal in (False, True):
        for cfg in cfgs:
            o, lse = tiletune.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, causal=causal, return_softmax_lse=True, config=cfg)
            for b in range(B):
                L = int(lens[b]); qq = q[b].double(); kk = k[b, :L].double().repeat_interleave(4, 1); vv = v[b, :L].double().repeat_interleave(4, 1)
                s = torch.einsum("qhd,khd->hqk", qq, kk) / math.sqrt(128)
                if causal:
                    i = torch.arange(Lq, device="cuda")[:, None]; j = torch.arange(L, device="cuda")[None, :]
                    s = s.masked_fill(j > i + L - Lq, float("-inf"))
                ro = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vv)
                err = (o[b].double() - ro).abs().max().item(); n += 1
                le = (lse[b].double() - torch.logsumexp(s, -1)).abs().max().item()
                if not (err < 2e-2 and le < 1e-3): bad += 1; print("FAIL", B, Lq, Lk, causal, cfg[-13:], b, err, le)
print(f"{n} checks, {bad} failures")
