#include "kernels/cubin_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fail.h"
#include "kernels/cuda_api.h"
#include "common/hash.h"
#include "tiletune.h"

#define CACHE_MAGIC "TTCACHE1"
/* Entries larger than this are not ours: a cubin of one variant is < 1 MB. */
#define ENTRY_MAX (64u << 20)

typedef struct entry_header {
    char magic[8];
    uint32_t ident_len;
    uint32_t reserved;
    uint64_t payload_len;
    uint64_t checksum; /* FNV-1a over identity then payload */
} entry_header;

/* mkdir -p with mode 0700 for the parts it creates. */
static int mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) < 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR; /* mkdir's EEXIST would say "File exists" */
        return -1;
    }
    return 0;
}

/*
 * The trust rule (docs/operations.md, "The compiled-kernel cache"): an
 * entry is code the worker loads onto the GPU, so only this uid may be
 * able to write it. The directory must be ours and writable by nobody
 * else (group/other write bits on a directory we own are removed, with a
 * warning in err); every directory above it must belong to root or to us
 * and be writable by others only with the sticky bit (/tmp), or another
 * user could swap the whole directory.
 */
static int check_dir(const char *path, char *err, size_t errlen) {
    uid_t me = geteuid();
    struct stat st;
    if (stat(path, &st) < 0)
        return tt__fail(TT_ERR_IO, err, errlen, "cache directory %s: %s", path, strerror(errno));
    if (st.st_uid != me)
        return tt__fail(TT_ERR_PERM, err, errlen,
                        "cache directory %s belongs to uid %d, not to this process's uid %d: not trusted",
                        path, (int)st.st_uid, (int)me);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
        if (slash == buf) slash[1] = '\0';
        else *slash = '\0';
        struct stat a;
        if (stat(buf, &a) < 0)
            return tt__fail(TT_ERR_IO, err, errlen, "cache directory's parent %s: %s", buf, strerror(errno));
        if (a.st_uid != 0 && a.st_uid != me)
            return tt__fail(TT_ERR_PERM, err, errlen,
                            "cache directory %s lies under %s, which belongs to uid %d: not trusted", path,
                            buf, (int)a.st_uid);
        if ((a.st_mode & (S_IWGRP | S_IWOTH)) && !(a.st_mode & S_ISVTX))
            return tt__fail(
                TT_ERR_PERM, err, errlen,
                "cache directory %s lies under %s, which others may write (mode %03o): not trusted", path,
                buf, (unsigned)(a.st_mode & 0777));
        if (slash == buf) break;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        mode_t fixed = st.st_mode & 07755 & ~(mode_t)(S_IWGRP | S_IWOTH);
        if (chmod(path, fixed) < 0)
            return tt__fail(TT_ERR_PERM, err, errlen,
                            "cache directory %s is writable by others (mode %03o): %s", path,
                            (unsigned)(st.st_mode & 0777), strerror(errno));
        tt__fail(0, err, errlen, "warning: cache directory %s was writable by others (mode %03o); now %03o",
                 path, (unsigned)(st.st_mode & 0777), (unsigned)(fixed & 0777));
    }
    return 0;
}

int tt__cubin_cache_dir(const char *dir, char *out, size_t outlen, char *err, size_t errlen) {
    char path[4096];
    const char *env = getenv(TT_CUBIN_CACHE_DIR_ENV);
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int w;
    if (dir && *dir) w = snprintf(path, sizeof path, "%s", dir);
    else if (env && *env) w = snprintf(path, sizeof path, "%s", env);
    else if (xdg && *xdg == '/') w = snprintf(path, sizeof path, "%s/tiletune", xdg);
    else if (home && *home) w = snprintf(path, sizeof path, "%s/.cache/tiletune", home);
    else
        return tt__fail(TT_ERR_IO, err, errlen, "no cache directory: set $%s or $HOME",
                        TT_CUBIN_CACHE_DIR_ENV);
    if (w < 0 || (size_t)w >= sizeof path || (size_t)w >= outlen)
        return tt__fail(TT_ERR_RANGE, err, errlen, "cache directory path too long");
    errno = 0;
    if (mkdirs(path) < 0)
        return tt__fail(TT_ERR_IO, err, errlen, "cache directory %s: %s", path, strerror(errno));
    if (err && errlen) err[0] = '\0';
    int rc = check_dir(path, err, errlen);
    if (rc < 0) return rc;
    memcpy(out, path, (size_t)w + 1);
    return 0;
}

int tt__cubin_cache_path(const char *dir, const char *key, char *out, size_t outlen) {
    int w = snprintf(out, outlen, "%s/%s.bin", dir, key);
    return (w < 0 || (size_t)w >= outlen) ? TT_ERR_RANGE : 0;
}

static uint64_t entry_checksum(const char *ident, size_t ident_len, const void *payload, size_t len) {
    uint64_t h = tt__hash_update(TT_HASH_INIT, ident, ident_len);
    return tt__hash_update(h, payload, len);
}

static int read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int tt__cubin_cache_get(const char *dir, const char *key, const char *ident, void **payload, size_t *len) {
    char path[4200];
    if (tt__cubin_cache_path(dir, key, path, sizeof path) < 0) return TT_ERR_RANGE;
    /* O_NONBLOCK: a FIFO at the entry's path must not block the open (a
     * compile thread would wait forever); it fails the S_ISREG check.
     * O_NOFOLLOW: a symlink is never an entry (it could name any file). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP) {
        unlink(path);
        return TT_ERR_CORRUPT;
    }
    if (fd < 0) return errno == ENOENT ? TT_ERR_NOTFOUND : TT_ERR_IO;
    int rc = TT_ERR_CORRUPT;
    char *id = NULL;
    void *data = NULL;
    size_t ident_len = strlen(ident);
    entry_header h;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof h) goto done;
    /* only this uid's entries: the checksum is public, anyone can make one */
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) goto done;
    if (read_all(fd, &h, sizeof h) < 0) goto done;
    if (memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) != 0) goto done;
    if (h.ident_len != ident_len || h.payload_len > ENTRY_MAX) goto done;
    if ((uint64_t)st.st_size != sizeof h + h.ident_len + h.payload_len) goto done;
    id = malloc(ident_len + 1);
    data = malloc(h.payload_len ? h.payload_len : 1);
    if (!id || !data) {
        rc = TT_ERR_NOMEM;
        goto done;
    }
    if (read_all(fd, id, ident_len) < 0 || read_all(fd, data, h.payload_len) < 0) goto done;
    if (memcmp(id, ident, ident_len) != 0) goto done;
    if (entry_checksum(id, ident_len, data, h.payload_len) != h.checksum) goto done;
    *payload = data;
    *len = h.payload_len;
    data = NULL;
    rc = 0;
done:
    close(fd);
    free(id);
    free(data);
    /* A failed check removes the entry so that the rebuilt one replaces it.
     * A concurrent writer may have renamed a good entry in between; losing
     * it costs one compile, nothing more. */
    if (rc == TT_ERR_CORRUPT) unlink(path);
    return rc;
}

int tt__cubin_cache_put(const char *dir, const char *key, const char *ident, const void *payload, size_t len,
                        char *err, size_t errlen) {
    char path[4200], tmp[4300];
    if (tt__cubin_cache_path(dir, key, path, sizeof path) < 0)
        return tt__fail(TT_ERR_RANGE, err, errlen, "cache path too long");
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) return tt__fail(TT_ERR_IO, err, errlen, "cache %s: %s", tmp, strerror(errno));
    entry_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, sizeof h.magic);
    h.ident_len = (uint32_t)strlen(ident);
    h.payload_len = len;
    h.checksum = entry_checksum(ident, h.ident_len, payload, len);
    if (write_all(fd, &h, sizeof h) < 0 || write_all(fd, ident, h.ident_len) < 0 ||
        write_all(fd, payload, len) < 0 || fsync(fd) < 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return tt__fail(TT_ERR_IO, err, errlen, "cache %s: %s", tmp, strerror(e));
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return tt__fail(TT_ERR_IO, err, errlen, "cache %s: %s", path, strerror(e));
    }
    return 0;
}
