#include "kernels/jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cubin_cache.h"
#include "kernels/cubin_elf.h"
#include "common/config.h"
#include "kernels/cuda_api.h"
#include "common/hash.h"
#include "common/key.h"
#include "kernels/family.h"

#ifndef TT_CUDA_INCLUDE_DIR
#define TT_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

/* Bumped when the entry payload layout or the compile flags change. */
#define JIT_FORMAT "tiletune-cubin-2"
/* Flags common to every variant. -Xptxas=-v makes ptxas' resource report
 * the program log, which is how NVRTC 13 exposes registers and spills. */
static const char *const base_flags[] = {"-std=c++17", "-Xptxas=-v"};
#define N_BASE_FLAGS (sizeof base_flags / sizeof base_flags[0])
#define MAX_FLAGS 48
#define HDR_MAX 64

/* The cache payload: the report as int32s, then the cubin. */
#define REPORT_WORDS 8

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int check_variant(const tt__variant *v, char *err, size_t errlen) {
    char msg[160];
    if (tt__config_check_ranges(&v->config, msg, sizeof msg) < 0)
        return tt__fail(TT_ERR_RANGE, err, errlen, "config: %s", msg);
    if (!tt__head_dim_supported(v->head_dim))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported head_dim %d", (int)v->head_dim);
    if (!tt__dtype_name(v->dtype))
        return tt__fail(TT_ERR_UNSUPPORTED, err, errlen, "unsupported dtype %d", (int)v->dtype);
    if (v->causal < 0 || v->causal > 2)
        return tt__fail(TT_ERR_INVAL, err, errlen, "causal must be 0, 1 or 2");
    const tt__family *f = tt__family_of(v->config.family);
    if (!f) return tt__fail(TT_ERR_INVAL, err, errlen, "family %d has no kernel", (int)v->config.family);
    int rc = tt__family_check_arch(f, v->arch, err, errlen);
    if (rc < 0) return rc;
    if (v->page_size != 0 && v->config.family != TT_FAMILY_SPLITKV)
        return tt__fail(TT_ERR_INVAL, err, errlen, "page_size %d: only family splitkv has a paged program",
                        (int)v->page_size);
    if (v->page_size < 0 || v->page_size > (1 << 20) || (v->page_size & (v->page_size - 1)))
        return tt__fail(TT_ERR_INVAL, err, errlen,
                        "page_size %d is not 0 (contiguous) or a power of two in 1..2^20", (int)v->page_size);
#ifdef TT_FAULT_INJECTION
    if (v->fault < TT_FAULT_NONE || v->fault > TT_FAULT_HANG)
#else
    if (v->fault != TT_FAULT_NONE)
#endif
        return tt__fail(TT_ERR_INVAL, err, errlen, "fault injection %d is not available in this build",
                        (int)v->fault);
    return 0;
}

int tt__jit_macros(const tt__variant *v, char *buf, size_t len) {
    size_t used = 0;
    int w;
#define APPEND(...)                                                         \
    do {                                                                    \
        w = snprintf(buf + used, len > used ? len - used : 0, __VA_ARGS__); \
        if (w < 0) return TT_ERR_RANGE;                                     \
        used += (size_t)w;                                                  \
    } while (0)
    const tt__family *f = tt__family_of(v->config.family);
    for (int i = 0; i < tt__knob_count(); i++) {
        const tt__knob *k = tt__knob_at(i);
        /* a knob only the launch reads: one program serves all its values */
        if (f && (f->host_knobs & (1u << i))) continue;
        APPEND("%s-D%s=%d", used ? " " : "", k->macro, (int)tt__knob_get(k, &v->config));
    }
    APPEND(" -DTT_HEAD_DIM=%d -DTT_DTYPE=%d -DTT_CAUSAL=%d -DTT_FAULT_INJECT=%d", (int)v->head_dim,
           (int)v->dtype, (int)v->causal, (int)v->fault);
    if (v->config.family == TT_FAMILY_SPLITKV) {
        APPEND(" -DTT_SKV_PAGED=%d", v->page_size != 0);
        if (v->page_size) {
            int shift = 0;
            while ((1 << shift) < v->page_size) shift++;
            APPEND(" -DTT_SKV_PAGE_SHIFT=%d", shift);
        }
    }
    if (f) APPEND(" -DTT_MAINLOOP=\"%s\"", f->files[0].name);
#undef APPEND
    if (used >= len) return TT_ERR_RANGE;
    return (int)used;
}

/* The number after `label` looking backwards: "... 40 bytes spill stores"
 * -> 40 for label " bytes spill stores". -1 if absent. */
static int number_before(const char *from, const char *to, const char *label) {
    const char *p = from, *hit = NULL;
    size_t n = strlen(label);
    while ((p = strstr(p, label)) && p < to) {
        hit = p;
        p += n;
    }
    if (!hit) return -1;
    const char *d = hit;
    while (d > from && d[-1] >= '0' && d[-1] <= '9') d--;
    if (d == hit) return -1;
    return atoi(d);
}

int tt__jit_parse_report(const char *log, tt__report *r) {
    /* ptxas prints, per entry function:
     *   Compiling entry function 'NAME' for 'sm_90'
     *   Function properties for NAME
     *       S bytes stack frame, A bytes spill stores, B bytes spill loads
     *   Used R registers, used N barriers, ... M bytes smem ...
     * Only the entry's own block is read: the source may hold other kernels. */
    const char *start = strstr(log, "Compiling entry function '" TT_SDPA_ENTRY "'");
    if (!start) return TT_ERR_NOTFOUND;
    const char *end = strstr(start + 1, "Compiling entry function");
    if (!end) end = start + strlen(start);
    const char *used = strstr(start, "Used ");
    if (!used || used > end) return TT_ERR_NOTFOUND;
    r->registers = atoi(used + 5);
    r->stack_frame = number_before(start, end, " bytes stack frame");
    r->spill_stores = number_before(start, end, " bytes spill stores");
    r->spill_loads = number_before(start, end, " bytes spill loads");
    const char *line_end = strchr(used, '\n');
    if (!line_end || line_end > end) line_end = end;
    r->static_smem = number_before(used, line_end, " bytes smem");
    if (r->static_smem < 0) r->static_smem = 0; /* ptxas omits "0 bytes smem" */
    if (r->registers <= 0 || r->stack_frame < 0 || r->spill_stores < 0 || r->spill_loads < 0)
        return TT_ERR_NOTFOUND;
    return 0;
}

static void report_pack(const tt__report *r, int32_t w[REPORT_WORDS]) {
    int32_t v[REPORT_WORDS] = {r->registers,   r->spill_stores, r->spill_loads, r->stack_frame,
                               r->static_smem, r->dynamic_smem, r->threads,     0};
    memcpy(w, v, sizeof v);
}

static void report_unpack(const int32_t w[REPORT_WORDS], tt__report *r) {
    memset(r, 0, sizeof *r);
    r->registers = w[0];
    r->spill_stores = w[1];
    r->spill_loads = w[2];
    r->stack_frame = w[3];
    r->static_smem = w[4];
    r->dynamic_smem = w[5];
    r->threads = w[6];
}

/* The toolkit's include directory for <cuda_fp16.h> and friends, which
 * NVRTC 13 does not carry built in. NULL when none is installed. */
static const char *cuda_include_dir(char *buf, size_t len) {
    const char *candidates[3] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), NULL};
    for (int i = 0; i < 2; i++) {
        if (!candidates[i] || !*candidates[i]) continue;
        snprintf(buf, len, "%s/include", candidates[i]);
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/cuda_fp16.h", buf);
        if (access(probe, R_OK) == 0) return buf;
    }
    if (access(TT_CUDA_INCLUDE_DIR "/cuda_fp16.h", R_OK) == 0) {
        snprintf(buf, len, "%s", TT_CUDA_INCLUDE_DIR);
        return buf;
    }
    return NULL;
}

/* Splits the macro line into argv-style flags in place. */
static int split_flags(char *line, const char **flags, int n, int max) {
    char *save = NULL;
    for (char *tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (n >= max) return -1;
        flags[n++] = tok;
    }
    return n;
}

static int nvrtc_compile(const tt__nvrtc *nv, const tt__source *src, const tt__variant *v, const char *macros,
                         void **cubin, size_t *cubin_len, tt__report *rep, char *err, size_t errlen) {
    char arch[32], inc[4200], line[1024];
    const char *flags[MAX_FLAGS];
    int n = 0;
    /* e.g. wgmma.mma_async exists only on the arch-specific sm_90a target */
    const tt__family *f = tt__family_of(v->config.family);
    snprintf(arch, sizeof arch, "-arch=sm_%d%s", (int)v->arch, f ? f->arch_suffix : "");
    flags[n++] = arch;
    for (size_t i = 0; i < N_BASE_FLAGS; i++) flags[n++] = base_flags[i];
    char incdir[4096];
    if (cuda_include_dir(incdir, sizeof incdir)) {
        snprintf(inc, sizeof inc, "-I%s", incdir);
        flags[n++] = inc;
    }
    snprintf(line, sizeof line, "%s", macros);
    n = split_flags(line, flags, n, MAX_FLAGS);
    if (n < 0) return tt__fail(TT_ERR_RANGE, err, errlen, "too many compile flags");

    const tt__source_header *hd;
    size_t nh = tt__source_headers(&hd);
    const char *hdr_src[HDR_MAX], *hdr_name[HDR_MAX];
    if (nh > HDR_MAX) return tt__fail(TT_ERR_RANGE, err, errlen, "too many kernel headers");
    for (size_t i = 0; i < nh; i++) {
        hdr_src[i] = hd[i].text;
        hdr_name[i] = hd[i].name;
    }
    nvrtcProgram prog = NULL;
    char *log = NULL;
    int rc = 0;
    nvrtcResult r = nv->CreateProgram(&prog, src->text, "sdpa.cu", (int)nh, hdr_src, hdr_name);
    if (r != NVRTC_SUCCESS)
        return tt__fail(TT_ERR_COMPILE, err, errlen, "nvrtcCreateProgram: %s", nv->GetErrorString(r));
    double t0 = now_ms();
    nvrtcResult cr = nv->CompileProgram(prog, n, flags);
    rep->compile_ms = now_ms() - t0;
    size_t log_len = 0;
    if (nv->GetProgramLogSize(prog, &log_len) != NVRTC_SUCCESS) log_len = 0;
    log = malloc(log_len + 1);
    if (!log) {
        rc = tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
        goto done;
    }
    log[0] = '\0';
    if (log_len && nv->GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
    log[log_len] = '\0';
    if (cr != NVRTC_SUCCESS) {
        rc = tt__fail(TT_ERR_COMPILE, err, errlen, "%s (sm_%d %s): %s", nv->GetErrorString(cr), (int)v->arch,
                      macros, log);
        goto done;
    }
    /* On the H200 machine NVRTC 13.0 now and then returned an empty log for
     * a compile that succeeded: the cubin's own attributes are read then. */
    int from_log = tt__jit_parse_report(log, rep) == 0;
    size_t len = 0;
    if (nv->GetCUBINSize(prog, &len) != NVRTC_SUCCESS || len == 0) {
        rc = tt__fail(TT_ERR_COMPILE, err, errlen, "NVRTC produced no CUBIN for sm_%d", (int)v->arch);
        goto done;
    }
    /* room for the report in front: the cache payload is built in place */
    char *buf = malloc(REPORT_WORDS * sizeof(int32_t) + len);
    if (!buf) {
        rc = tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
        goto done;
    }
    if (nv->GetCUBIN(prog, buf + REPORT_WORDS * sizeof(int32_t)) != NVRTC_SUCCESS) {
        free(buf);
        rc = tt__fail(TT_ERR_COMPILE, err, errlen, "nvrtcGetCUBIN failed");
        goto done;
    }
    if (!from_log &&
        tt__cubin_elf_report(buf + REPORT_WORDS * sizeof(int32_t), len, TT_SDPA_ENTRY, rep) < 0) {
        free(buf);
        rc = tt__fail(TT_ERR_COMPILE, err, errlen,
                      "no ptxas report for %s, neither in the compile log nor in the cubin (sm_%d %s): %s",
                      TT_SDPA_ENTRY, (int)v->arch, macros, log);
        goto done;
    }
    *cubin = buf;
    *cubin_len = len;
done:
    free(log);
    nv->DestroyProgram(&prog);
    return rc;
}

int tt__jit_compile(const tt__jit_opts *opts, const tt__variant *v, tt__cubin **out, char *err,
                    size_t errlen) {
    if (!v || !out) return tt__fail(TT_ERR_INVAL, err, errlen, "no variant");
    int rc = check_variant(v, err, errlen);
    if (rc < 0) return rc;
    tt__jit_opts none = {0};
    if (!opts) opts = &none;
    const tt__source *src = opts->source;
    if (!src && (rc = tt__source_default(&src, err, errlen)) < 0) return rc;
    const tt__nvrtc *nv;
    if ((rc = tt__nvrtc_get(&nv, err, errlen)) < 0) return rc;

    char macros[512], ident[1024];
    if (tt__jit_macros(v, macros, sizeof macros) < 0)
        return tt__fail(TT_ERR_RANGE, err, errlen, "compile flags too long");
    snprintf(ident, sizeof ident, "%s rev=%s nvrtc=%d.%d arch=sm_%d %s", JIT_FORMAT, src->rev, nv->major,
             nv->minor, (int)v->arch, macros);
    uint64_t h = tt__hash_update(TT_HASH_INIT, src->text, src->len);
    const tt__source_header *hd;
    size_t nh = tt__source_headers(&hd);
    for (size_t i = 0; i < nh; i++) h = tt__hash_update(h, hd[i].text, hd[i].len);
    h = tt__hash_str(h, ident);
    char key[17];
    tt__hash_hex(h, key);

    tt__cubin *c = calloc(1, sizeof *c);
    if (!c) return tt__fail(TT_ERR_NOMEM, err, errlen, "out of memory");
    memcpy(c->key, key, sizeof key);
    memcpy(c->rev, src->rev, sizeof c->rev);

    char dir[4096];
    int use_cache = !opts->no_cache && tt__cubin_cache_dir(opts->cache_dir, dir, sizeof dir, NULL, 0) == 0;
    void *payload = NULL;
    size_t plen = 0;
    const size_t head = REPORT_WORDS * sizeof(int32_t);
    if (use_cache && tt__cubin_cache_get(dir, key, ident, &payload, &plen) == 0 && plen > head) {
        int32_t w[REPORT_WORDS];
        memcpy(w, payload, head);
        report_unpack(w, &c->report);
        c->report.from_cache = 1;
    } else {
        free(payload);
        payload = NULL;
        rc = nvrtc_compile(nv, src, v, macros, &payload, &plen, &c->report, err, errlen);
        if (rc < 0) {
            free(c);
            return rc;
        }
        c->report.dynamic_smem = (int32_t)tt__config_smem_bytes(&v->config, v->head_dim);
        c->report.threads = tt__config_threads(&v->config);
        int32_t w[REPORT_WORDS];
        report_pack(&c->report, w);
        memcpy(payload, w, head);
        plen += head;
        /* a cache that cannot be written only costs a compile next time */
        if (use_cache) tt__cubin_cache_put(dir, key, ident, payload, plen, NULL, 0);
    }
    /* the cubin stays in the payload buffer, after the report words */
    c->len = plen - head;
    memmove(payload, (char *)payload + head, c->len);
    c->data = payload;
    *out = c;
    return 0;
}

int tt__report_clean(const tt__report *r) {
    return r->spill_stores == 0 && r->spill_loads == 0 && r->stack_frame == 0;
}

void tt__cubin_free(tt__cubin *c) {
    if (!c) return;
    free(c->data);
    free(c);
}
