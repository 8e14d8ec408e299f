#!/usr/bin/env bash
# check_units.sh units|verify DIR
#
# DIR is <build>/systemd: the units configured for installation, and
# verify/ with the same units pointing at the built daemon (it exists only
# when the tiletuned target does).
#   units:  the hardening and paths the service must keep
#           (docs/operations.md), the configuration, reload and metrics
#           timer settings, and the sysusers.d/tmpfiles.d files applied
#           to a scratch root (as root only: tmpfiles must chown).
#   verify: `systemd-analyze verify` on the generated units: no error and
#           no warning about our units.
set -euo pipefail
mode=$1 dir=$2
svc=$dir/tiletuned.service sock=$dir/tiletuned.socket
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

# has FILE LINE: FILE has exactly this line.
has() { grep -qxF -- "$2" "$1" || fail "$(basename "$1") lacks '$2'"; }
# lacks FILE REGEX: no line of FILE matches.
lacks() { ! grep -qE -- "$2" "$1" || fail "$(basename "$1") must not have: $(grep -E -- "$2" "$1")"; }

check_units() {
    has "$sock" "ListenStream=/run/tiletune/tiletune.sock"
    has "$sock" "SocketMode=0660"
    has "$sock" "SocketGroup=tiletune"
    has "$sock" "WantedBy=sockets.target"

    has "$svc" "Type=notify"
    has "$svc" "NotifyAccess=main"
    grep -qE '^ExecStart=/[^ ]*/tiletuned --db /var/lib/tiletune/tiletune\.db --cache-dir /var/cache/tiletune( |$)' "$svc" ||
        fail "ExecStart must run tiletuned on /var/lib/tiletune/tiletune.db and /var/cache/tiletune"
    lacks "$svc" '^ExecStart=.*--socket'
    has "$svc" "Requires=tiletuned.socket"
    has "$svc" "User=tiletune"
    has "$svc" "Group=tiletune"
    has "$svc" "StateDirectory=tiletune"
    has "$svc" "CacheDirectory=tiletune"
    has "$svc" "RuntimeDirectory=tiletune"
    has "$svc" "RuntimeDirectoryPreserve=yes"
    grep -qE '^WatchdogSec=[1-9]' "$svc" || fail "no WatchdogSec="
    has "$svc" "Restart=on-failure"
    local opt
    for opt in ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
               RestrictAddressFamilies=AF_UNIX DevicePolicy=closed ProtectKernelTunables=yes \
               ProtectKernelModules=yes ProtectControlGroups=yes RestrictNamespaces=yes \
               LockPersonality=yes RestrictSUIDSGID=yes RestrictRealtime=yes \
               SystemCallArchitectures=native CapabilityBoundingSet=; do
        has "$svc" "$opt"
    done
    for opt in "/dev/nvidiactl rw" "/dev/nvidia-uvm rw" "/dev/nvidia0 rw" \
               "char-nvidia-frontend rw" "char-nvidia-uvm rw"; do
        has "$svc" "DeviceAllow=$opt"
    done
    # PrivateDevices hides /dev/nvidia*; the CUDA driver maps W+X memory;
    # it reads /proc/driver/nvidia.
    lacks "$svc" '^PrivateDevices='
    lacks "$svc" '^MemoryDenyWriteExecute='
    lacks "$svc" '^ProcSubset='
    lacks "$svc" '^@'
    echo "units: socket and service carry the required settings"

    has "$dir/tiletune.sysusers" 'u tiletune - "tiletune daemon" /var/lib/tiletune -'
    has "$dir/tiletune.sysusers" 'g tiletune-admin -'
    grep -qE '^d /run/tiletune 0755 tiletune tiletune' "$dir/tiletune.tmpfiles" ||
        fail "tmpfiles.d does not create /run/tiletune"
    # the admin group comes from the configuration file, so that a reload
    # can change it: the unit must not pin it
    lacks "$svc" '^ExecStart=.*--admin-group'
    grep -qxE 'admin-group = tiletune-admin' "$dir/tiletuned.conf" ||
        fail "tiletuned.conf does not name the sysusers admin group"
    has "$svc" "EnvironmentFile=-/etc/default/tiletuned"
    has "$svc" 'ExecReload=/bin/kill -HUP $MAINPID'
    grep -qE '^ExecStart=.* \$TILETUNED_OPTS$' "$svc" || fail "ExecStart does not take \$TILETUNED_OPTS"
    local m=$dir/tiletune-metrics.service t=$dir/tiletune-metrics.timer
    has "$m" "Type=oneshot"
    grep -qE '^ExecStart=/[^ ]*/tiletune stats --prom --output /[^ ]+/tiletune\.prom$' "$m" ||
        fail "tiletune-metrics.service must write tiletune.prom with 'stats --prom --output'"
    has "$m" "ProtectSystem=strict"
    has "$m" "RestrictAddressFamilies=AF_UNIX"
    grep -qE '^OnUnitActiveSec=[0-9]+s$' "$t" || fail "the metrics timer does not repeat"
    has "$t" "WantedBy=timers.target"

    if [[ $(id -u) != 0 ]]; then
        echo "sysusers/tmpfiles: not applied (needs root to chown)"
        return
    fi
    command -v systemd-sysusers >/dev/null || skip "systemd-sysusers not installed"
    # not local: the EXIT trap runs after this function returns
    root=$(mktemp -d "${TMPDIR:-/tmp}/tt-root.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root/etc"
    touch "$root/etc/passwd" "$root/etc/group" "$root/etc/shadow" "$root/etc/gshadow"
    systemd-sysusers --root="$root" "$dir/tiletune.sysusers" || fail "systemd-sysusers failed"
    systemd-tmpfiles --root="$root" --create "$dir/tiletune.tmpfiles" || fail "systemd-tmpfiles failed"
    grep -q '^tiletune:x:[0-9]*:[0-9]*:.*:/var/lib/tiletune:' "$root/etc/passwd" || fail "no tiletune user"
    grep -q '^tiletune-admin:' "$root/etc/group" || fail "no tiletune-admin group"
    local uid
    uid=$(awk -F: '$1 == "tiletune" { print $3 }' "$root/etc/passwd")
    for d in run/tiletune:755 var/lib/tiletune:750 var/cache/tiletune:750; do
        [[ $(stat -c %u:%a "$root/${d%%:*}") == "$uid:${d##*:}" ]] ||
            fail "/${d%%:*}: $(stat -c %U:%a "$root/${d%%:*}"), want tiletune:${d##*:}"
    done
    echo "sysusers/tmpfiles: user, groups and directories created in a scratch root"
}

check_verify() {
    command -v systemd-analyze >/dev/null || skip "systemd-analyze not installed (apt-get install systemd)"
    [[ -f $dir/verify/tiletuned.service ]] ||
        skip "the tiletuned target does not exist yet: systemd-analyze verify needs ExecStart's binary"
    local bin
    bin=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$dir/verify/tiletuned.service")
    [[ -x $bin ]] || fail "$bin is not built"
    # The verified copy is the installed one but for the binary's path.
    diff <(sed 's/^ExecStart=[^ ]*/ExecStart=X/' "$svc") \
         <(sed 's/^ExecStart=[^ ]*/ExecStart=X/' "$dir/verify/tiletuned.service") ||
        fail "verify/tiletuned.service differs from tiletuned.service beyond ExecStart's path"
    cmp -s "$sock" "$dir/verify/tiletuned.socket" || fail "verify/tiletuned.socket differs"
    local extra=()
    if [[ -f $dir/verify/tiletune-metrics.service ]]; then
        diff <(sed 's/^ExecStart=[^ ]*/ExecStart=X/' "$dir/tiletune-metrics.service") \
             <(sed 's/^ExecStart=[^ ]*/ExecStart=X/' "$dir/verify/tiletune-metrics.service") ||
            fail "verify/tiletune-metrics.service differs beyond ExecStart's path"
        extra=(./tiletune-metrics.service ./tiletune-metrics.timer)
    fi

    local out rc=0
    cd "$dir/verify"
    out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
              ./tiletuned.socket ./tiletuned.service "${extra[@]}" 2>&1) || rc=$?
    [[ -z $out ]] || printf '%s\n' "$out"
    ((rc == 0)) || fail "systemd-analyze verify exited $rc"
    # Warnings about the host's own units are not ours to fix.
    ! grep -q 'tiletune' <<<"$out" || fail "systemd-analyze verify warned about our units"
    echo "systemd-analyze verify: tiletuned.socket, tiletuned.service ${extra[*]} are clean"
}

case $mode in
units) check_units ;;
verify) check_verify ;;
*) fail "unknown mode $mode" ;;
esac
