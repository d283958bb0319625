#!/bin/sh
# topodra NIC driver: CDI createRuntime hook (runs on the host, POSIX sh, no Python needed).
#
#   netdev.sh attach --state-dir DIR --pin ID --host-name IF --name NEW [--mac MAC] [--pci BDF]
#                    [--up] [--ip CIDR]... [--allow-stacked]
#   netdev.sh pin    --state-dir DIR --pin ID
#
# stdin: the OCI container state (JSON with the container's "pid").
#
# attach: pin the container's network namespace (bind-mount /proc/<pid>/ns/net onto
#   DIR/netns/ID) and move the interface into it under NEW, in one netlink request so a
#   pod-side name never clashes with a host name. The pin keeps the namespace, and with it the
#   interface, alive after the container is gone, so the driver's unprepare can always give the
#   interface back to the host under its original name. Idempotent: a second container of the
#   same pod finds the interface already inside and only re-pins.
# pin: only the pin (the runtime moves the interface itself, CDI netDevices).
#
# An interface stacked with others of the host (a port of a bond or bridge, the parent of a
# VLAN or macvlan) is never moved without --allow-stacked: the move would break those. The
# driver withholds such interfaces already; this checks again at the moment of the move.
#
# On any failure the interface stays where it was (normally the host) and the hook exits
# non-zero, which fails the container's creation with the message below. Every argument is
# checked before the first side effect: the driver validated them already, but the CDI spec
# is a file on the host, and this runs as root.
#
# Log: DIR/hook.log, moved to DIR/hook.log.1 once it passes LOG_MAX bytes (two files at most).

set -u
set -f # no argument is ever a glob
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
LOG_MAX=${TOPODRA_HOOK_LOG_MAX:-1048576}
MAX_IPS=16
# the sysfs the driver publishes from: the host's, or (set by the driver in the hook's env) the
# sys/ of its --sysfs-root at a synthetic machine, whose PCI addresses the host may also have
SYSFS=${TOPODRA_HOOK_SYSFS:-/sys}

action=${1:-}
[ $# -gt 0 ] && shift
state_dir='' pin='' host='' name='' mac='' pci='' up=0 ips='' allow_stacked=0

log() {
    printf '%s topodra-nic-hook[%s] %s pin=%s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" \
        "$action" "$pin" "$*" >&2
    if [ -n "$state_dir" ] && [ -d "$state_dir" ]; then
        logf=$state_dir/hook.log
        size=$(stat -c %s "$logf" 2>/dev/null) || size=0
        case "$size" in '' | *[!0-9]*) size=0 ;; esac
        if [ "$size" -ge "$LOG_MAX" ]; then
            mv -f "$logf" "$logf.1" 2>/dev/null
        fi
        printf '%s [%s] %s pin=%s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" "$action" "$pin" "$*" \
            >>"$logf" 2>/dev/null
    fi
}
die() {
    log "error: $*"
    exit 1
}

# An interface name the kernel takes as it is: 1-15 printable ASCII characters, none of
# '/', ':', '%' or whitespace, not '.' or '..' (the NIC config's rules).
check_ifname() { # what, value
    case "$2" in
    '' | . | .. | *[/:%]* | *[![:graph:]]*) die "$1 must be an interface name, got '$2'" ;;
    esac
    [ "${#2}" -le 15 ] || die "$1 must be at most 15 characters, got '$2'"
}

# An address with its prefix length in the characters of one, nothing else (no scope id).
check_ip() {
    case "$1" in
    */*/* | /* | */ | *[!0-9A-Fa-f.:/]*) die "--ip must be an address with prefix length, got '$1'" ;;
    */*) ;;
    *) die "--ip must be an address with prefix length, got '$1'" ;;
    esac
    case "${1#*/}" in *[!0-9]*) die "--ip prefix length must be a number, got '$1'" ;; esac
    [ "${#1}" -le 64 ] || die "--ip is longer than any address, got '$1'"
}

nips=0
while [ $# -gt 0 ]; do
    case "$1" in
    --up) up=1; shift; continue ;;
    --allow-stacked) allow_stacked=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || die "missing value for $1"
    case "$1" in
    --state-dir) state_dir=$2 ;;
    --pin) pin=$2 ;;
    --host-name) host=$2 ;;
    --name) name=$2 ;;
    --mac) mac=$(printf '%s' "$2" | tr 'A-F' 'a-f') ;;
    --pci) pci=$2 ;;
    --ip)
        check_ip "$2"
        nips=$((nips + 1))
        [ "$nips" -le "$MAX_IPS" ] || die "more than $MAX_IPS --ip arguments"
        ips="$ips $2"
        ;;
    *) die "unknown argument $1" ;;
    esac
    shift 2
done

case "$action" in attach | pin) ;; *) die "usage: netdev.sh attach|pin --state-dir DIR --pin ID ..." ;; esac
[ -n "$state_dir" ] || die "--state-dir is required"
case "$state_dir" in /*) ;; *) die "--state-dir must be an absolute path, got '$state_dir'" ;; esac
case "$pin" in '' | . | .. | *[!A-Za-z0-9_.-]*) die "--pin must be a plain file name, got '$pin'" ;; esac
case "$mac" in 00:00:00:00:00:00 | '') mac='' ;; esac
case "$mac" in
'') ;;
[0-9a-f][0-9a-f]:*) case "$mac" in *[!0-9a-f:]*) die "--mac must be a MAC address, got '$mac'" ;; esac ;;
*) die "--mac must be a MAC address, got '$mac'" ;;
esac
case "$pci" in *[!0-9a-f:.]*) die "--pci must be a PCI address, got '$pci'" ;; esac
case "$SYSFS" in /*) ;; *) die "TOPODRA_HOOK_SYSFS must be an absolute path, got '$SYSFS'" ;; esac
if [ "$action" = attach ]; then
    check_ifname --host-name "$host"
    check_ifname --name "$name"
fi

# The container's pid: the first top-level "pid": <digits> of the state (annotation values are
# JSON strings, so a quoted "pid" inside them cannot look like this after splitting on commas).
state=$(cat)
pid=$(printf '%s' "$state" | tr ',{}' '\n\n\n' | sed -n 's/^[[:space:]]*"pid"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' | head -n 1)
[ -n "$pid" ] || die "no pid in the container state on stdin"
target=/proc/$pid/ns/net
[ -e "$target" ] || die "container process $pid has no network namespace ($target)"

pin_dir=$state_dir/netns
pin_file=$pin_dir/$pin

# --- helpers ------------------------------------------------------------------------------------

# name of the link with MAC $1 in the namespace of "$@" (a command prefix), or nothing
by_mac() {
    want=$1
    shift
    # only a line's first link/ field: an interface's alias, which comes later, is free text
    "$@" ip -o link show 2>/dev/null | awk -v m="$want" '{
        for (i = 1; i < NF; i++) if ($i ~ /^link\//) {
            if (tolower($(i + 1)) == m) { n = $2; sub(/:$/, "", n); sub(/@.*/, "", n); print n; exit }
            break
        }
    }'
}

exists() { # name, then the command prefix of the namespace
    want=$1
    shift
    "$@" ip link show dev "$want" >/dev/null 2>&1
}

is_pinned() { # an nsfs bind mount has the device number of our own namespace files
    [ -e "$pin_file" ] || return 1
    [ "$(stat -L -c %d "$pin_file" 2>/dev/null)" = "$(stat -L -c %d /proc/self/ns/net 2>/dev/null)" ]
}

same_netns() { # pin and target are the same namespace (same nsfs inode)
    [ "$(stat -L -c %i "$pin_file" 2>/dev/null)" = "$(stat -L -c %i "$target" 2>/dev/null)" ]
}

do_pin() {
    mkdir -p "$pin_dir" || die "cannot create $pin_dir"
    if is_pinned; then
        if same_netns; then
            return 0
        fi
        umount "$pin_file" 2>/dev/null || umount -l "$pin_file" 2>/dev/null || die "cannot unmount old pin $pin_file"
    fi
    [ -e "$pin_file" ] || : >"$pin_file" || die "cannot create $pin_file"
    mount --bind "$target" "$pin_file" || die "cannot bind-mount $target onto $pin_file"
    log "pinned network namespace of pid $pid at $pin_file"
}

in_target() { nsenter -t "$pid" -n "$@"; }
in_pin() { nsenter --net="$pin_file" "$@"; }

# Set the link up and add the addresses; on failure give the interface back to the host as $1
# when this run moved it (empty: it was inside already, and stays there).
configure() {
    back=$1
    if [ "$up" = 1 ] || [ -n "$ips" ]; then
        in_target ip link set dev "$name" up || fail_inside "$back" "cannot set $name up in the container"
    fi
    for a in $ips; do
        out=$(in_target ip addr add "$a" dev "$name" 2>&1) || case "$out" in
            *"File exists"* | *"already assigned"*) ;;
            *) fail_inside "$back" "cannot add address $a to $name in the container: $out" ;;
            esac
    done
}

fail_inside() { # host name to give the interface back under (or empty), message
    if [ -n "$1" ]; then
        in_target ip link set dev "$name" down 2>/dev/null
        if out=$(in_target ip link set dev "$name" netns "$$" name "$1" 2>&1); then
            log "gave $name back to the host as $1"
        else
            log "cannot give $name back to the host as $1: $out"
        fi
    fi
    die "$2"
}

# --- pin only (CDI netDevices mode) -----------------------------------------------------------

if [ "$action" = pin ]; then
    do_pin
    exit 0
fi

# --- attach -------------------------------------------------------------------------------------

[ -n "$host" ] || die "--host-name is required"
[ -n "$name" ] || die "--name is required"

# 1. Already inside the container's namespace (second container of the pod, or a retried create)?
inside=''
if [ -n "$mac" ]; then
    inside=$(by_mac "$mac" in_target)
elif exists "$name" in_target; then
    inside=$name
fi
if [ -n "$inside" ]; then
    [ "$inside" = "$name" ] || die "interface with MAC $mac is in the container as '$inside', not '$name'"
    do_pin
    configure ''
    log "interface already in the container as $name"
    exit 0
fi

# 2. Where is it now? A PCI function's netdevs are in its sysfs folder while they are on the
#    host: the one with the MAC (a function may have several, e.g. two ports), else the one
#    under its host name, else, without a MAC to go by, any (the kernel renames a physical
#    interface that comes back from a dead namespace when its name is taken). With a MAC that
#    none has, a netdev there may be a sibling port while the claim's is in an older pin (3.). Without a PCI folder
#    (a virtual interface) by its name. Never by MAC across the host: a bond, a VLAN or a bridge
#    can carry the NIC's MAC too, and a pod can give its interface any MAC (the uplink's),
#    which the interface keeps when it comes home and the next prepare records.
current=''
if [ -n "$pci" ] && [ -d "$SYSFS/bus/pci/devices/$pci/net" ]; then
    set +f # the one glob of this script, over a folder the kernel fills
    for d in "$SYSFS"/bus/pci/devices/"$pci"/net/*; do
        [ -e "$d" ] || continue
        if [ -n "$mac" ] && [ "$(tr 'A-F' 'a-f' <"$d/address" 2>/dev/null)" = "$mac" ]; then
            current=${d##*/}
            break
        fi
        if [ "${d##*/}" = "$host" ] || { [ -z "$mac" ] && [ -z "$current" ]; }; then
            current=${d##*/}
        fi
    done
    set -f
elif exists "$host" env; then
    current=$host
fi

# 3. Or still in an older pinned namespace of this claim (the pod's sandbox was re-created).
if [ -z "$current" ] && is_pinned && ! same_netns; then
    old=''
    if [ -n "$mac" ]; then old=$(by_mac "$mac" in_pin); elif exists "$name" in_pin; then old=$name; fi
    if [ -n "$old" ]; then
        in_pin ip link set dev "$old" down 2>/dev/null
        in_pin ip link set dev "$old" netns "$pid" name "$name" \
            || die "cannot move $old from the old pinned namespace into the container as $name"
        log "moved $old from the previous pinned namespace into the container as $name"
        do_pin
        configure "$host"
        exit 0
    fi
fi
[ -n "$current" ] || die "interface $host (mac ${mac:-unknown}, pci ${pci:-none}) is not on the host"

if exists "$name" in_target; then
    die "the container already has an interface named $name; choose another interfaceName"
fi

# 4. Not stacked with another interface of the host (see the top of this file).
if [ "$allow_stacked" = 0 ]; then
    if [ -L "$SYSFS/class/net/$current/master" ]; then
        m=$(readlink "$SYSFS/class/net/$current/master")
        die "interface $current is a port of ${m##*/}: not moved (the NIC driver's --nic-allow-stacked allows it)"
    fi
    set +f
    for u in "$SYSFS"/class/net/"$current"/upper_*; do
        [ -L "$u" ] || continue
        set -f
        die "interface $current carries ${u##*/upper_}: not moved (the NIC driver's --nic-allow-stacked allows it)"
    done
    set -f
fi

# 5. Pin first: from here on, wherever the interface ends up, unprepare can find it.
do_pin
ip link set dev "$current" down 2>/dev/null
if ! out=$(ip link set dev "$current" netns "$pid" name "$name" 2>&1); then
    die "cannot move $current into the container as $name: $out"
fi
log "moved $current into the network namespace of pid $pid as $name"
configure "$current"
exit 0
