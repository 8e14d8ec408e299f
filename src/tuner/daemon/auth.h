/*
 * Who may change the tuning state. The peer's credentials are taken with
 * SO_PEERCRED when a connection is accepted (never from a pid, which can be
 * recycled). Read-only verbs are open to every local user who can reach
 * the socket; changing verbs need root, the daemon's own uid, or
 * membership of the admin group (primary or supplementary, from the group
 * database via getgrouplist).
 */
#ifndef TT_TUNER_AUTH_H
#define TT_TUNER_AUTH_H

#include <sys/types.h>

typedef struct tt_peer {
    uid_t uid;
    gid_t gid;
    pid_t pid;
    int known; /* 0: SO_PEERCRED failed; treated as an unprivileged peer */
} tt_peer;

typedef struct tt_auth {
    uid_t self_uid;
    int have_group;
    gid_t admin_gid;
} tt_auth;

/* TT_ERR_NOTFOUND if the group does not exist. */
int tt_auth_init(tt_auth *a, const char *admin_group, char *err, size_t errlen);
/* The credentials of the peer of a connected Unix socket. */
int tt_peer_from_fd(int fd, tt_peer *out);
/* 1 if the peer may use changing verbs. May consult the group database
 * (NSS) for supplementary groups, so the daemon asks once per connection
 * and only when a changing verb arrives. */
int tt_auth_is_admin(const tt_auth *a, const tt_peer *p);

#endif
