#include "kernels/family.h"

#include "common/fail.h"

extern const tt__family tt__family_mma, tt__family_wgmma, tt__family_ws, tt__family_splitkv;

/* THE table: one row a family, at the index of its id. */
const tt__family *const tt__families[] = {&tt__family_mma, &tt__family_wgmma, &tt__family_ws,
                                          &tt__family_splitkv};
const size_t tt__family_count = sizeof tt__families / sizeof tt__families[0];

const tt__family *tt__family_of(int32_t id) {
    if (id < 0 || (size_t)id >= tt__family_count) return NULL;
    return tt__families[id];
}

int64_t tt__config_smem_bytes(const tt_config *c, int32_t head_dim) {
    const tt__family *f = tt__family_of(c->family);
    return f ? f->smem_bytes(c, head_dim) : -1;
}

int32_t tt__config_threads(const tt_config *c) {
    const tt__family *f = tt__family_of(c->family);
    return f ? f->threads(c) : -1;
}

int tt__family_check_arch(const tt__family *f, int32_t arch, char *err, size_t errlen) {
    if (arch >= f->arch_min && arch <= f->arch_max) return 0;
    if (f->arch_min == f->arch_max)
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "sm_%d: the %s kernel runs on sm_%d only", (int)arch,
                        f->name, (int)f->arch_min);
    return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "sm_%d: the %s kernel needs sm_%d to sm_%d", (int)arch,
                    f->name, (int)f->arch_min, (int)f->arch_max);
}

int tt__config_default_arch(const tt_key_v2 *key, int32_t arch, tt_config *out) {
    if (!key || !out) return TT_ERR_INVAL;
    for (size_t i = 0; i < tt__family_count; i++) {
        const tt__family *f = tt__families[i];
        for (size_t d = 0; d < sizeof f->defaults / sizeof f->defaults[0] && f->defaults[d].lookup; d++)
            if (f->defaults[d].arch == arch && f->defaults[d].lookup(key, out) == 0) return 0;
    }
    return tt_config_default_v2(key, out);
}
