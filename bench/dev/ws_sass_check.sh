#!/usr/bin/env bash
# For each cubin given: how many MUFU.EX2 the consumer loop issues between
# its wait for S = Q K^T (DEPBAR.LE gsb0, 0x1) and its wait for P V
# (DEPBAR.LE gsb0, 0x0): the softmax that runs under P V. Needs cuobjdump.
co=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for f in "$@"; do
  "$co" -sass "$f" | awk -v f="$(basename "$f")" '
    /DEPBAR.LE gsb0, 0x1/ { inloop = 1; n = 0; next }
    inloop && /DEPBAR.LE gsb0, 0x0/ { print f ": exp2 between the two waits: " n; inloop = 0 }
    inloop && /MUFU.EX2/ { n++ }
    { if ($0 ~ /HGMMA/) h++; if ($0 ~ /USETMAXREG/) r++; if ($0 ~ /UTMALDG/) t++ }
    END { print f ": HGMMA " h ", USETMAXREG " r ", UTMALDG " t }'
done
