/* The run-time compiler and the cubin cache, on the CPU: NVRTC needs no GPU. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/cubin_cache.h"
#include "kernels/cubin_elf.h"
#include "common/config.h"
#include "kernels/cuda_api.h"
#include "common/hash.h"
#include "kernels/jit.h"
#include "kernels/family.h"
#include "kernels/source.h"
#include "tt_test.h"

static char tmpdir[256];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tmpdir(void) { nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* One temporary directory per test (each test is a process), removed when
 * the test exits, passing or failing. */
static const char *make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tt_jit_XXXXXX");
    if (!mkdtemp(tmpdir)) TT_FAIL_AT("mkdtemp failed");
    atexit(rm_tmpdir);
    return tmpdir;
}

static void need_nvrtc(void) {
    const tt__nvrtc *nv;
    char err[512];
    if (tt__nvrtc_get(&nv, err, sizeof err) < 0) TT_SKIP("%s", err);
}

static tt__variant variant_for(int head_dim, tt_dtype dtype, int causal, int arch) {
    tt__variant v;
    memset(&v, 0, sizeof v);
    tt_key key;
    memset(&key, 0, sizeof key);
    key.head_dim = head_dim;
    key.dtype = dtype;
    key.causal = causal;
    key.seqlen_q = key.seqlen_k = 1024;
    if (tt_config_default(&key, &v.config) < 0) TT_FAIL_AT("no default config");
    v.head_dim = head_dim;
    v.dtype = dtype;
    v.causal = causal;
    v.arch = arch;
    return v;
}

static int count_files(const char *dir, const char *contains) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, contains)) n++;
    closedir(d);
    return n;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

TEST(parse_report_reads_the_entry_block) {
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'other' for 'sm_90'\n"
        "ptxas info    : Function properties for other\n"
        "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 0 barriers, 8 bytes cumulative stack size, 512 bytes smem\n"
        "ptxas info    : Compiling entry function 'tt_sdpa_fwd_kernel' for 'sm_90'\n"
        "ptxas info    : Function properties for tt_sdpa_fwd_kernel\n"
        "ptxas         .     16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 16 bytes cumulative stack size, 380 bytes cmem[0]\n"
        "ptxas info    : Compile time = 1.0 ms\n";
    tt__report r;
    memset(&r, 0, sizeof r);
    ASSERT_OK(tt__jit_parse_report(log, &r));
    ASSERT_EQ(r.registers, 255);
    ASSERT_EQ(r.stack_frame, 16);
    ASSERT_EQ(r.spill_stores, 24);
    ASSERT_EQ(r.spill_loads, 20);
    ASSERT_EQ(r.static_smem, 0);
    ASSERT_EQ(tt__jit_parse_report("ptxas info : nothing\n", &r), TT_ERR_NOTFOUND);
}

/* The cubin's own attributes agree with ptxas' log: registers and stack
 * frame of a clean and of a spilling variant (the fallback when NVRTC
 * returns no log). */
TEST(cubin_attributes_match_the_ptxas_report) {
    need_nvrtc();
    const char *dir = make_tmpdir();
    int shapes[][3] = {{128, 64, 4}, {128, 128, 4}, {64, 32, 4}};
    for (int i = 0; i < 3; i++) {
        tt__variant v = variant_for(128, TT_DTYPE_FP16, i == 2, 90);
        v.config.block_m = shapes[i][0];
        v.config.block_n = shapes[i][1];
        v.config.warps = shapes[i][2];
        v.config.stages = 1;
        tt__jit_opts o = {.cache_dir = dir, .no_cache = 1};
        tt__cubin *c;
        char err[2048];
        if (tt__jit_compile(&o, &v, &c, err, sizeof err) < 0) TT_FAIL_AT("%s", err);
        tt__report r;
        memset(&r, 0, sizeof r);
        ASSERT_OK(tt__cubin_elf_report(c->data, c->len, TT_SDPA_ENTRY, &r));
        ASSERT_EQ(r.registers, c->report.registers);
        ASSERT_EQ(r.stack_frame, c->report.stack_frame);
        ASSERT_EQ(tt__report_clean(&r), tt__report_clean(&c->report));
        if (i == 1) ASSERT(r.stack_frame > 0); /* 128x128 at d128 spills */
        ASSERT_EQ(tt__cubin_elf_report(c->data, c->len, "no_such_kernel", &r), TT_ERR_NOTFOUND);
        ASSERT_EQ(tt__cubin_elf_report(c->data, 40, TT_SDPA_ENTRY, &r), TT_ERR_CORRUPT);
        ASSERT_EQ(tt__cubin_elf_report("not an elf image at all, really not.....................", 56,
                                       TT_SDPA_ENTRY, &r),
                  TT_ERR_CORRUPT);
        tt__cubin_free(c);
    }
}

/* A minimal ELF64 image the report reader accepts: sections null,
 * .shstrtab, .strtab, .symtab (symbol 1 = the entry), .nv.info with one
 * REGCOUNT record (symbol 1, `regs`). Section headers at `shoff`. */
static size_t put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
    return (size_t)n;
}
static size_t tiny_elf(unsigned char *b, size_t cap, uint32_t regs) {
    static const char shstr[] = "\0.shstrtab\0.strtab\0.symtab\0.nv.info";
    static const char str[] = "\0" TT_SDPA_ENTRY;
    memset(b, 0, cap);
    memcpy(b, "\177ELF", 4);
    b[4] = 2;
    size_t o = 64;
    size_t shstr_off = o, str_off = (o += sizeof shstr), sym_off = (o += sizeof str);
    memcpy(b + shstr_off, shstr, sizeof shstr);
    memcpy(b + str_off, str, sizeof str);
    put_le(b + sym_off + 24, 1, 4); /* symbol 1's name: strtab offset 1 */
    size_t info_off = (o += 48);
    b[info_off] = 0x04;     /* EIFMT_SVAL */
    b[info_off + 1] = 0x2f; /* EIATTR_REGCOUNT */
    put_le(b + info_off + 2, 8, 2);
    put_le(b + info_off + 4, 1, 4);
    put_le(b + info_off + 8, regs, 4);
    size_t shoff = (o += 16);
    struct {
        uint32_t name, type, link;
        uint64_t off, size, entsize;
    } sh[5] = {{0, 0, 0, 0, 0, 0},
               {1, 3, 0, shstr_off, sizeof shstr, 0},
               {11, 3, 0, str_off, sizeof str, 0},
               {19, 2, 2, sym_off, 48, 24},
               {27, 0x70000000, 0, info_off, 16, 0}};
    for (int i = 0; i < 5; i++) {
        unsigned char *h = b + shoff + 64 * (size_t)i;
        put_le(h, sh[i].name, 4);
        put_le(h + 4, sh[i].type, 4);
        put_le(h + 0x18, sh[i].off, 8);
        put_le(h + 0x20, sh[i].size, 8);
        put_le(h + 0x28, sh[i].link, 4);
        put_le(h + 0x38, sh[i].entsize, 8);
    }
    put_le(b + 0x28, shoff, 8);
    put_le(b + 0x3a, 64, 2);
    put_le(b + 0x3c, 5, 2);
    put_le(b + 0x3e, 1, 2);
    ASSERT(shoff + 5 * 64 <= cap);
    return shoff + 5 * 64;
}

/* Corrupt images are refused without reading outside the buffer (the
 * section header offset comes from the file: offset + index must not wrap). */
/* Family ws with the bottom-right mask (the diagonal shifted by seqlen_k -
 * seqlen_q) compiles for sm_90a with no spill, as its top-left form does. */
TEST(ws_bottom_right_compiles_clean) {
    need_nvrtc();
    const char *dir = make_tmpdir();
    for (int causal = 1; causal <= 2; causal++) {
        tt__variant v;
        memset(&v, 0, sizeof v);
        v.config = (tt_config){.family = TT_FAMILY_WS,
                               .block_m = 128,
                               .block_n = 128,
                               .warps = 12,
                               .stages = 2,
                               .layout = 1,
                               .q_in_regs = 1};
        v.head_dim = 128;
        v.dtype = TT_DTYPE_BF16;
        v.causal = causal;
        v.arch = 90;
        tt__jit_opts o = {.cache_dir = dir, .no_cache = 1};
        tt__cubin *c;
        char err[4096];
        if (tt__jit_compile(&o, &v, &c, err, sizeof err) < 0) TT_FAIL_AT("causal %d: %s", causal, err);
        if (!tt__report_clean(&c->report))
            TT_FAIL_AT("causal %d: spills %d+%d bytes", causal, (int)c->report.spill_stores,
                       (int)c->report.spill_loads);
        tt__cubin_free(c);
    }
}

TEST(cubin_elf_refuses_corrupt_images) {
    unsigned char b[1024];
    size_t len = tiny_elf(b, sizeof b, 40);
    tt__report r;
    memset(&r, 0, sizeof r);
    ASSERT_OK(tt__cubin_elf_report(b, len, TT_SDPA_ENTRY, &r));
    ASSERT_EQ(r.registers, 40);
    ASSERT_EQ(tt__cubin_elf_report(b, len, "other", &r), TT_ERR_NOTFOUND);
    uint64_t bad_shoff[] = {UINT64_MAX - 63, UINT64_MAX - 64 * 4, UINT64_MAX, len, len - 63};
    for (size_t i = 0; i < sizeof bad_shoff / sizeof bad_shoff[0]; i++) {
        tiny_elf(b, sizeof b, 40);
        put_le(b + 0x28, bad_shoff[i], 8);
        ASSERT_EQ(tt__cubin_elf_report(b, len, TT_SDPA_ENTRY, &r), TT_ERR_CORRUPT);
    }
    /* a register count that does not fit the report's int32 */
    len = tiny_elf(b, sizeof b, 0x80000000u);
    memset(&r, 0, sizeof r);
    ASSERT_EQ(tt__cubin_elf_report(b, len, TT_SDPA_ENTRY, &r), TT_ERR_CORRUPT);
    ASSERT_EQ(r.registers, 0);
}

TEST(macros_name_every_knob) {
    tt__variant v = variant_for(128, TT_DTYPE_BF16, 1, 90);
    char buf[512];
    ASSERT(tt__jit_macros(&v, buf, sizeof buf) > 0);
    for (int i = 0; i < tt__knob_count(); i++) {
        char want[64];
        snprintf(want, sizeof want, "-D%s=%d", tt__knob_at(i)->macro,
                 (int)tt__knob_get(tt__knob_at(i), &v.config));
        ASSERT_CONTAINS(buf, want);
    }
    ASSERT_CONTAINS(buf, "-DTT_HEAD_DIM=128");
    ASSERT_CONTAINS(buf, "-DTT_DTYPE=1");
    ASSERT_CONTAINS(buf, "-DTT_CAUSAL=1");
    ASSERT_CONTAINS(buf, "-DTT_FAULT_INJECT=0");
    ASSERT_EQ(tt__jit_macros(&v, buf, 20), TT_ERR_RANGE);
}

TEST(compile_reports_and_caches) {
    need_nvrtc();
    const char *dir = make_tmpdir();
    tt__jit_opts o = {.cache_dir = dir};
    tt__variant v = variant_for(64, TT_DTYPE_FP16, 0, 90);
    tt__cubin *a = NULL, *b = NULL;
    char err[4096];
    int rc = tt__jit_compile(&o, &v, &a, err, sizeof err);
    if (rc < 0) TT_FAIL_AT("compile: %s", err);
    ASSERT_EQ(a->report.from_cache, 0);
    ASSERT(a->report.registers > 0 && a->report.registers <= 255);
    ASSERT_EQ(a->report.dynamic_smem, tt__config_smem_bytes(&v.config, 64));
    ASSERT_EQ(a->report.threads, v.config.warps * 32);
    ASSERT(a->report.compile_ms > 0);
    ASSERT(a->len > 64 && memcmp(a->data, "\177ELF", 4) == 0); /* a CUBIN is an ELF image */
    ASSERT_EQ(count_files(dir, ".bin"), 1);
    ASSERT_EQ(count_files(dir, ".tmp"), 0); /* the temp file was renamed */

    ASSERT_OK(tt__jit_compile(&o, &v, &b, err, sizeof err));
    ASSERT_EQ(b->report.from_cache, 1);
    ASSERT_EQ(b->report.compile_ms, 0);
    ASSERT_EQ(b->report.registers, a->report.registers);
    ASSERT_EQ(b->report.spill_stores, a->report.spill_stores);
    ASSERT_EQ(b->len, a->len);
    ASSERT(memcmp(a->data, b->data, a->len) == 0);
    ASSERT_STREQ(a->key, b->key);
    tt__cubin_free(a);
    tt__cubin_free(b);

    /* each part of the variant is part of the key */
    tt__variant other[4] = {v, v, v, v};
    other[0].arch = 80;
    other[1].causal = 1;
    other[2].dtype = TT_DTYPE_BF16;
    other[3].config.stages = v.config.stages == 1 ? 2 : 1;
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(tt__jit_compile(&o, &other[i], &a, err, sizeof err));
        ASSERT_EQ(a->report.from_cache, 0);
        tt__cubin_free(a);
    }
    ASSERT_EQ(count_files(dir, ".bin"), 5);
}

/* Damages the only cache entry in `dir` with `how`, then checks that the
 * next compile detects it, rebuilds and rewrites a good entry. */
static void damage_and_rebuild(void (*how)(const char *path, size_t len)) {
    need_nvrtc();
    const char *dir = make_tmpdir();
    tt__jit_opts o = {.cache_dir = dir};
    tt__variant v = variant_for(32, TT_DTYPE_FP16, 1, 80);
    tt__cubin *a = NULL, *b = NULL, *c = NULL;
    char err[4096];
    ASSERT_OK(tt__jit_compile(&o, &v, &a, err, sizeof err));
    char path[4200];
    ASSERT_OK(tt__cubin_cache_path(dir, a->key, path, sizeof path));
    struct stat st;
    ASSERT_OK(stat(path, &st));
    how(path, (size_t)st.st_size);
    ASSERT_OK(tt__jit_compile(&o, &v, &b, err, sizeof err));
    ASSERT_EQ(b->report.from_cache, 0); /* detected: compiled again */
    ASSERT_EQ(b->len, a->len);
    ASSERT(memcmp(a->data, b->data, a->len) == 0);
    ASSERT_OK(tt__jit_compile(&o, &v, &c, err, sizeof err));
    ASSERT_EQ(c->report.from_cache, 1); /* and the rebuilt entry is good */
    tt__cubin_free(a);
    tt__cubin_free(b);
    tt__cubin_free(c);
}

static void truncate_half(const char *path, size_t len) { ASSERT_OK(truncate(path, (off_t)(len / 2))); }
static void truncate_header(const char *path, size_t len) {
    (void)len;
    ASSERT_OK(truncate(path, 10));
}
static void flip_payload_byte(const char *path, size_t len) {
    int fd = open(path, O_RDWR);
    ASSERT(fd >= 0);
    unsigned char byte;
    off_t at = (off_t)(len - len / 3);
    ASSERT_EQ(pread(fd, &byte, 1, at), 1);
    byte ^= 0x40;
    ASSERT_EQ(pwrite(fd, &byte, 1, at), 1);
    close(fd);
}
static void flip_magic(const char *path, size_t len) {
    (void)len;
    int fd = open(path, O_RDWR);
    ASSERT(fd >= 0);
    ASSERT_EQ(pwrite(fd, "X", 1, 0), 1);
    close(fd);
}
static void append_garbage(const char *path, size_t len) {
    (void)len;
    FILE *f = fopen(path, "ab");
    ASSERT(f);
    fputs("garbage", f);
    fclose(f);
}

TEST(cache_truncated_entry_is_rebuilt) { damage_and_rebuild(truncate_half); }
TEST(cache_truncated_header_is_rebuilt) { damage_and_rebuild(truncate_header); }
TEST(cache_flipped_byte_is_rebuilt) { damage_and_rebuild(flip_payload_byte); }
TEST(cache_bad_magic_is_rebuilt) { damage_and_rebuild(flip_magic); }
TEST(cache_trailing_bytes_are_rebuilt) { damage_and_rebuild(append_garbage); }

TEST(cache_identity_mismatch_is_a_miss) {
    const char *dir = make_tmpdir();
    char err[256];
    ASSERT_OK(tt__cubin_cache_put(dir, "k1", "ident-a", "payload", 7, err, sizeof err));
    void *p = NULL;
    size_t n = 0;
    ASSERT_EQ(tt__cubin_cache_get(dir, "k1", "ident-b", &p, &n), TT_ERR_CORRUPT);
    ASSERT_EQ(tt__cubin_cache_get(dir, "k1", "ident-a", &p, &n), TT_ERR_NOTFOUND); /* removed */
    ASSERT_EQ(tt__cubin_cache_get(dir, "nothing", "ident-a", &p, &n), TT_ERR_NOTFOUND);
    /* a FIFO in an entry's place: refused at once (opening it for reading
     * blocked until a writer came) and removed */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/fifo.bin", dir);
    ASSERT_OK(mkfifo(fifo, 0600));
    ASSERT_EQ(tt__cubin_cache_get(dir, "fifo", "ident-a", &p, &n), TT_ERR_CORRUPT);
    ASSERT(access(fifo, F_OK) != 0);
}

/* Another user's entry, a symlink, a group/world-writable file: refused
 * and removed, however valid the checksum (anyone can compute it). */
TEST(cache_refuses_entries_this_uid_did_not_make) {
    const char *dir = make_tmpdir();
    char err[256], path[600], target[600];
    void *p = NULL;
    size_t n = 0;
    /* a valid entry elsewhere, linked into the cache */
    char other[512];
    snprintf(other, sizeof other, "%s/elsewhere", dir);
    ASSERT_OK(mkdir(other, 0700));
    ASSERT_OK(tt__cubin_cache_put(other, "k", "ident", "payload", 7, err, sizeof err));
    snprintf(target, sizeof target, "%s/k.bin", other);
    snprintf(path, sizeof path, "%s/k.bin", dir);
    ASSERT_OK(symlink(target, path));
    ASSERT_EQ(tt__cubin_cache_get(dir, "k", "ident", &p, &n), TT_ERR_CORRUPT);
    ASSERT(access(path, F_OK) != 0 && access(target, F_OK) == 0); /* the link went, not its target */
    /* a valid entry others may write */
    ASSERT_OK(tt__cubin_cache_put(dir, "k", "ident", "payload", 7, err, sizeof err));
    ASSERT_OK(chmod(path, 0666));
    ASSERT_EQ(tt__cubin_cache_get(dir, "k", "ident", &p, &n), TT_ERR_CORRUPT);
    ASSERT_OK(tt__cubin_cache_put(dir, "k", "ident", "payload", 7, err, sizeof err));
    ASSERT_OK(tt__cubin_cache_get(dir, "k", "ident", &p, &n));
    free(p);
    /* a valid entry of another uid (as root: chown) */
    if (geteuid() == 0) {
        ASSERT_OK(chown(path, 65534, 65534));
        ASSERT_EQ(tt__cubin_cache_get(dir, "k", "ident", &p, &n), TT_ERR_CORRUPT);
    }
}

/* The directory itself: another uid's is refused, ours writable by others
 * is repaired with a warning, and one under a directory anyone may write
 * (without the sticky bit) is refused. */
TEST(cache_dir_must_be_ours_alone) {
    char out[4096], err[256], sub[512];
    const char *dir = make_tmpdir();
    snprintf(sub, sizeof sub, "%s/c", dir);
    ASSERT_OK(mkdir(sub, 0777));
    ASSERT_OK(chmod(sub, 0777));
    ASSERT_OK(tt__cubin_cache_dir(sub, out, sizeof out, err, sizeof err));
    ASSERT_CONTAINS(err, "was writable by others");
    struct stat st;
    ASSERT_OK(stat(sub, &st));
    ASSERT_EQ(st.st_mode & 0777, 0755);
    ASSERT_OK(chmod(dir, 0777)); /* the parent: anyone may swap c */
    ASSERT_EQ(tt__cubin_cache_dir(sub, out, sizeof out, err, sizeof err), TT_ERR_PERM);
    ASSERT_CONTAINS(err, "others may write");
    ASSERT_OK(chmod(dir, 01777)); /* sticky, as /tmp: fine */
    ASSERT_OK(tt__cubin_cache_dir(sub, out, sizeof out, err, sizeof err));
    ASSERT_OK(chmod(dir, 0700));
    if (geteuid() == 0) {
        ASSERT_OK(chown(sub, 65534, 65534));
        ASSERT_EQ(tt__cubin_cache_dir(sub, out, sizeof out, err, sizeof err), TT_ERR_PERM);
        ASSERT_CONTAINS(err, "belongs to uid 65534");
    }
}

/* Readers racing a writer never see a partial entry: every read is a hit
 * with the full payload or (before the first rename) a miss. */
struct race {
    const char *dir;
    int stop;
    int bad;
};

static void *race_writer(void *arg) {
    struct race *r = arg;
    static char payload[1 << 18];
    for (int i = 0; i < 60; i++) {
        memset(payload, 'a' + i % 26, sizeof payload);
        if (tt__cubin_cache_put(r->dir, "hot", "ident", payload, sizeof payload, NULL, 0) < 0) r->bad++;
    }
    __atomic_store_n(&r->stop, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

TEST(cache_writes_are_atomic) {
    struct race r = {make_tmpdir(), 0, 0};
    pthread_t w;
    pthread_create(&w, NULL, race_writer, &r);
    int hits = 0;
    while (!__atomic_load_n(&r.stop, __ATOMIC_SEQ_CST)) {
        void *p = NULL;
        size_t n = 0;
        int rc = tt__cubin_cache_get(r.dir, "hot", "ident", &p, &n);
        if (rc == 0) {
            hits++;
            const char *c = p;
            if (n != 1 << 18) r.bad++;
            for (size_t i = 1; i < n; i++)
                if (c[i] != c[0]) {
                    r.bad++;
                    break;
                }
            free(p);
        } else if (rc != TT_ERR_NOTFOUND) {
            r.bad++;
        }
    }
    pthread_join(w, NULL);
    ASSERT_EQ(r.bad, 0);
    ASSERT_EQ(count_files(r.dir, ".tmp"), 0);
    (void)hits;
}

TEST(cache_dir_from_env_and_default) {
    char out[4096], err[256];
    const char *dir = make_tmpdir();
    char want[512];
    snprintf(want, sizeof want, "%s/a/b", dir);
    setenv(TT_CUBIN_CACHE_DIR_ENV, want, 1);
    ASSERT_OK(tt__cubin_cache_dir(NULL, out, sizeof out, err, sizeof err));
    ASSERT_STREQ(out, want);
    struct stat st;
    ASSERT_OK(stat(want, &st));
    ASSERT(S_ISDIR(st.st_mode));
    unsetenv(TT_CUBIN_CACHE_DIR_ENV);
    setenv("XDG_CACHE_HOME", dir, 1);
    ASSERT_OK(tt__cubin_cache_dir(NULL, out, sizeof out, err, sizeof err));
    snprintf(want, sizeof want, "%s/tiletune", dir);
    ASSERT_STREQ(out, want);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", dir, 1);
    ASSERT_OK(tt__cubin_cache_dir(NULL, out, sizeof out, err, sizeof err));
    snprintf(want, sizeof want, "%s/.cache/tiletune", dir);
    ASSERT_STREQ(out, want);
    /* an explicit directory wins; one that cannot be made is an error */
    ASSERT_OK(tt__cubin_cache_dir(dir, out, sizeof out, err, sizeof err));
    ASSERT_STREQ(out, dir);
    ASSERT_EQ(tt__cubin_cache_dir("/proc/no/such/dir", out, sizeof out, err, sizeof err), TT_ERR_IO);
    ASSERT_CONTAINS(err, "/proc/no/such/dir");
    /* a file where the directory should be: said so, not "File exists" */
    char file[512];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    ASSERT(f != NULL);
    fclose(f);
    ASSERT_EQ(tt__cubin_cache_dir(file, out, sizeof out, err, sizeof err), TT_ERR_IO);
    ASSERT_CONTAINS(err, "Not a directory");
}

struct par {
    const char *dir;
    tt__variant v[8];
    tt__cubin *out[4][8];
    int rc[4][8];
    int idx;
};

static void *par_thread(void *arg) {
    struct par *p = arg;
    int t = __atomic_fetch_add(&p->idx, 1, __ATOMIC_SEQ_CST);
    tt__jit_opts o = {.cache_dir = p->dir};
    /* every thread compiles all 8, in a different order */
    for (int i = 0; i < 8; i++) {
        int j = (i + 2 * t) % 8;
        char err[2048];
        p->rc[t][j] = tt__jit_compile(&o, &p->v[j], &p->out[t][j], err, sizeof err);
    }
    return NULL;
}

TEST(parallel_compiles_from_4_threads) {
    need_nvrtc();
    struct par *p = calloc(1, sizeof *p);
    p->dir = make_tmpdir();
    int hd[4] = {32, 64, 96, 128};
    for (int i = 0; i < 8; i++) p->v[i] = variant_for(hd[i % 4], (tt_dtype)(i / 4), 0, 80);
    pthread_t th[4];
    for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, par_thread, p);
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    for (int j = 0; j < 8; j++)
        for (int t = 0; t < 4; t++) {
            ASSERT_OK(p->rc[t][j]);
            ASSERT_EQ(p->out[t][j]->len, p->out[0][j]->len);
            ASSERT(memcmp(p->out[t][j]->data, p->out[0][j]->data, p->out[0][j]->len) == 0);
            ASSERT_EQ(p->out[t][j]->report.registers, p->out[0][j]->report.registers);
        }
    ASSERT_EQ(count_files(p->dir, ".bin"), 8);
    ASSERT_EQ(count_files(p->dir, ".tmp"), 0);
    /* and the entries they left are whole */
    tt__jit_opts o = {.cache_dir = p->dir};
    for (int j = 0; j < 8; j++) {
        tt__cubin *c;
        ASSERT_OK(tt__jit_compile(&o, &p->v[j], &c, NULL, 0));
        ASSERT_EQ(c->report.from_cache, 1);
        tt__cubin_free(c);
        for (int t = 0; t < 4; t++) tt__cubin_free(p->out[t][j]);
    }
    free(p);
}

/* The revision hashes the root file and every embedded header, each equal
 * to its file under src/kernels; NVRTC finds no other header (the compile
 * tests would fail on a missing one). */
TEST(embedded_revision_is_the_source_hash) {
    char rev[TT_ID_MAX];
    ASSERT_OK(tt_kernel_revision(rev));
    size_t n = 0;
    char *src = read_file(TT_KERNEL_SOURCE_FILE, &n);
    ASSERT(src);
    uint64_t h = tt__hash_update(TT_HASH_INIT, src, n);
    const tt__source_header *hd;
    size_t nh = tt__source_headers(&hd);
    ASSERT(nh >= 2 + tt__family_count);
    for (size_t i = 0; i < nh; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/src/kernels/%s", TT_SOURCE_DIR, hd[i].name);
        size_t hn = 0;
        char *text = read_file(path, &hn);
        if (!text) TT_FAIL_AT("header %s: no file %s", hd[i].name, path);
        if (hn != hd[i].len || memcmp(text, hd[i].text, hn) != 0)
            TT_FAIL_AT("header %s differs from %s", hd[i].name, path);
        h = tt__hash_update(h, text, hn);
        free(text);
    }
    /* each family's mainloop is one of them */
    for (size_t f = 0; f < tt__family_count; f++) {
        int found = 0;
        for (size_t i = 0; i < nh; i++) found |= strcmp(hd[i].name, tt__families[f]->files[0].name) == 0;
        ASSERT(found);
    }
    char hex[17];
    tt__hash_hex(h, hex);
    ASSERT_STREQ(rev, hex);
    const tt__source *s;
    ASSERT_OK(tt__source_default(&s, NULL, 0));
    ASSERT_STREQ(s->origin, "embedded");
    ASSERT_EQ(s->len, n);
    free(src);
}

TEST(edited_source_changes_revision_and_key) {
    need_nvrtc();
    char embedded[TT_ID_MAX];
    const tt__source *def;
    ASSERT_OK(tt__source_default(&def, NULL, 0)); /* resolved before the env is set */
    memcpy(embedded, def->rev, sizeof embedded);

    const char *dir = make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/edited.cu", dir);
    FILE *f = fopen(path, "w");
    ASSERT(f);
    fputs(def->text, f);
    fputs("\n// an edit: same kernel, new revision\n", f);
    fclose(f);

    tt__source *ed = NULL;
    char err[512];
    ASSERT_OK(tt__source_load(path, &ed, err, sizeof err));
    ASSERT(strcmp(ed->rev, embedded) != 0);
    ASSERT_STREQ(ed->origin, path);

    tt__variant v = variant_for(64, TT_DTYPE_BF16, 0, 90);
    tt__jit_opts o1 = {.cache_dir = dir, .source = def}, o2 = {.cache_dir = dir, .source = ed};
    tt__cubin *a, *b;
    ASSERT_OK(tt__jit_compile(&o1, &v, &a, err, sizeof err));
    ASSERT_OK(tt__jit_compile(&o2, &v, &b, err, sizeof err));
    ASSERT(strcmp(a->key, b->key) != 0);
    ASSERT_EQ(b->report.from_cache, 0);
    ASSERT_STREQ(b->rev, ed->rev);
    tt__cubin_free(a);
    tt__cubin_free(b);
    tt__source_free(ed);

    ASSERT_EQ(tt__source_load("/no/such/file.cu", &ed, err, sizeof err), TT_ERR_NOTFOUND);
    ASSERT_CONTAINS(err, "/no/such/file.cu");
}

/* In a fresh process (each test is one) the environment variable decides. */
TEST(env_source_is_the_process_source) {
    const char *dir = make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/k.cu", dir);
    FILE *f = fopen(path, "w");
    fputs("// not a kernel\n", f);
    fclose(f);
    setenv(TT_KERNEL_SOURCE_ENV, path, 1);
    char rev[TT_ID_MAX];
    ASSERT_OK(tt_kernel_revision(rev));
    const tt__source *s;
    ASSERT_OK(tt__source_default(&s, NULL, 0));
    ASSERT_STREQ(s->origin, path);
    ASSERT_STREQ(s->text, "// not a kernel\n");
    ASSERT_STREQ(rev, s->rev);
    /* and compiling it is a compile error naming the entry point */
    if (tt__nvrtc_get(&(const tt__nvrtc *){0}, NULL, 0) == 0) {
        tt__variant v = variant_for(64, TT_DTYPE_FP16, 0, 80);
        tt__jit_opts o = {.cache_dir = dir};
        tt__cubin *c;
        char err[2048];
        ASSERT_EQ(tt__jit_compile(&o, &v, &c, err, sizeof err), TT_ERR_COMPILE);
        ASSERT_CONTAINS(err, "tt_sdpa_fwd_kernel");
    }
}

TEST(env_source_missing_file_is_an_error) {
    setenv(TT_KERNEL_SOURCE_ENV, "/no/such/kernel.cu", 1);
    char rev[TT_ID_MAX];
    ASSERT_EQ(tt_kernel_revision(rev), TT_ERR_NOTFOUND);
    const tt__source *s;
    char err[512];
    ASSERT_EQ(tt__source_default(&s, err, sizeof err), TT_ERR_NOTFOUND);
    ASSERT_CONTAINS(err, "TILETUNE_KERNEL_SOURCE");
}

TEST(illegal_variant_is_a_compile_error) {
    need_nvrtc();
    tt__variant v = variant_for(64, TT_DTYPE_FP16, 0, 90);
    v.config.block_m = 48; /* 12 rows per warp: the source's #error */
    tt__jit_opts o = {.no_cache = 1};
    tt__cubin *c;
    char err[4096];
    ASSERT_EQ(tt__jit_compile(&o, &v, &c, err, sizeof err), TT_ERR_COMPILE);
    ASSERT_CONTAINS(err, "TT_BLOCK_M");
    ASSERT_CONTAINS(err, "-DTT_BLOCK_M=48");
}

TEST(variant_checks_before_compiling) {
    tt__variant v = variant_for(64, TT_DTYPE_FP16, 0, 90);
    tt__cubin *c;
    char err[512];
    tt__variant bad = v;
    bad.head_dim = 80;
    ASSERT_EQ(tt__jit_compile(NULL, &bad, &c, err, sizeof err), TT_ERR_UNSUPPORTED);
    bad = v;
    bad.arch = 75;
    ASSERT_EQ(tt__jit_compile(NULL, &bad, &c, err, sizeof err), TT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err, "sm_75");
    bad = v;
    bad.causal = 3;
    ASSERT_EQ(tt__jit_compile(NULL, &bad, &c, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "causal");
    bad = v;
    bad.config.stages = 9;
    ASSERT_EQ(tt__jit_compile(NULL, &bad, &c, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "stages");
#ifndef TT_FAULT_INJECTION
    bad = v;
    bad.fault = TT_FAULT_OOB_WRITE;
    ASSERT_EQ(tt__jit_compile(NULL, &bad, &c, err, sizeof err), TT_ERR_INVAL);
    ASSERT_CONTAINS(err, "fault injection");
#endif
}

TEST(reference_kernel_compiles) {
    need_nvrtc();
    const tt__source *ref;
    ASSERT_OK(tt__source_reference(&ref, NULL, 0));
    int hd[5] = {32, 64, 96, 128, 256};
    for (int i = 0; i < 5; i++)
        for (int dt = 0; dt < 2; dt++) {
            tt__variant v;
            memset(&v, 0, sizeof v);
            tt__reference_config(&v.config);
            v.head_dim = hd[i];
            v.dtype = (tt_dtype)dt;
            v.causal = i % 2;
            v.arch = 80;
            tt__jit_opts o = {.source = ref, .no_cache = 1};
            tt__cubin *c;
            char err[4096];
            int rc = tt__jit_compile(&o, &v, &c, err, sizeof err);
            if (rc < 0) TT_FAIL_AT("reference d%d: %s", hd[i], err);
            ASSERT_EQ(c->report.spill_stores, 0);
            tt__cubin_free(c);
        }
}

TT_TEST_MAIN()
