#include "tuner/daemon/auth.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/proto.h"
#include "tiletune.h"

int tt_auth_init(tt_auth *a, const char *admin_group, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->self_uid = getuid();
    if (!admin_group || !*admin_group) return 0;
    char buf[4096];
    struct group gr, *res = NULL;
    int rc = getgrnam_r(admin_group, &gr, buf, sizeof buf, &res);
    if (rc == 0 && res) {
        a->admin_gid = gr.gr_gid;
        a->have_group = 1;
        return 0;
    }
    /* A number names the gid directly, as in chown. */
    int64_t v;
    if (tt__parse_i64(admin_group, 0, INT32_MAX, &v) == 0) {
        a->admin_gid = (gid_t)v;
        a->have_group = 1;
        return 0;
    }
    snprintf(err, errlen, "admin group '%s' does not exist", admin_group);
    return TT_ERR_NOTFOUND;
}

int tt_peer_from_fd(int fd, tt_peer *out) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return TT_ERR_IO;
    out->uid = cred.uid;
    out->gid = cred.gid;
    out->pid = cred.pid;
    out->known = 1;
    return 0;
}

static int user_in_group(uid_t uid, gid_t base, gid_t want) {
    char buf[4096];
    struct passwd pw, *res = NULL;
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || !res) return 0;
    int n = 64;
    for (int attempt = 0; attempt < 4; attempt++) {
        gid_t *groups = malloc((size_t)n * sizeof *groups);
        if (!groups) return 0;
        int got = n;
        if (getgrouplist(pw.pw_name, base, groups, &got) >= 0) {
            int found = 0;
            for (int i = 0; i < got; i++) found |= groups[i] == want;
            free(groups);
            return found;
        }
        free(groups);
        n = got > n ? got : n * 2; /* got says how many there are */
    }
    return 0;
}

int tt_auth_is_admin(const tt_auth *a, const tt_peer *p) {
    if (!p->known) return 0;
    if (p->uid == 0 || p->uid == a->self_uid) return 1;
    if (!a->have_group) return 0;
    if (p->gid == a->admin_gid) return 1;
    return user_in_group(p->uid, p->gid, a->admin_gid);
}
