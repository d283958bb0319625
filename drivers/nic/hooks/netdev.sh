#!/bin/sh
# topodra NIC driver: CDI createRuntime hook (runs on the host, POSIX sh, no Python needed).
#
#   netdev.sh attach --state-dir DIR --pin ID --host-name IF --name NEW [--mac MAC] [--pci BDF]
#                    [--up] [--ip CIDR]...
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
# On any failure the interface stays where it was (normally the host) and the hook exits
# non-zero, which fails the container's creation with the message below.

set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

action=${1:-}
[ $# -gt 0 ] && shift
state_dir='' pin='' host='' name='' mac='' pci='' up=0 ips=''

log() {
    printf '%s topodra-nic-hook[%s] %s pin=%s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" \
        "$action" "$pin" "$*" >&2
    if [ -n "$state_dir" ] && [ -d "$state_dir" ]; then
        printf '%s [%s] %s pin=%s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" "$action" "$pin" "$*" \
            >>"$state_dir/hook.log" 2>/dev/null
    fi
}
die() {
    log "error: $*"
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
    --up) up=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || die "missing value for $1"
    case "$1" in
    --state-dir) state_dir=$2 ;;
    --pin) pin=$2 ;;
    --host-name) host=$2 ;;
    --name) name=$2 ;;
    --mac) mac=$(printf '%s' "$2" | tr 'A-F' 'a-f') ;;
    --pci) pci=$2 ;;
    --ip) ips="$ips $2" ;;
    *) die "unknown argument $1" ;;
    esac
    shift 2
done

case "$action" in attach | pin) ;; *) die "usage: netdev.sh attach|pin --state-dir DIR --pin ID ..." ;; esac
[ -n "$state_dir" ] || die "--state-dir is required"
case "$pin" in '' | */* | . | ..) die "--pin must be a plain file name, got '$pin'" ;; esac
case "$mac" in 00:00:00:00:00:00 | '') mac='' ;; esac

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
    "$@" ip -o link show 2>/dev/null | awk -v m="$want" '{
        for (i = 1; i < NF; i++) if ($i ~ /^link\//) {
            if (tolower($(i + 1)) == m) { n = $2; sub(/:$/, "", n); sub(/@.*/, "", n); print n; exit }
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

configure() {
    if [ "$up" = 1 ] || [ -n "$ips" ]; then
        in_target ip link set dev "$name" up || die "cannot set $name up in the container"
    fi
    for a in $ips; do
        out=$(in_target ip addr add "$a" dev "$name" 2>&1) || case "$out" in
            *"File exists"* | *"already assigned"*) ;;
            *) die "cannot add address $a to $name in the container: $out" ;;
            esac
    done
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
    configure
    log "interface already in the container as $name"
    exit 0
fi

# 2. Where is it now? The host, by PCI address, MAC or name (the kernel renames a physical
#    interface that comes back from a dead namespace when its name is taken).
current=''
if [ -n "$pci" ] && [ -d "/sys/bus/pci/devices/$pci/net" ]; then
    for d in /sys/bus/pci/devices/"$pci"/net/*; do
        [ -e "$d" ] || continue
        current=${d##*/}
        break
    done
fi
if [ -z "$current" ] && [ -n "$mac" ]; then
    current=$(by_mac "$mac" env)
fi
if [ -z "$current" ] && [ -z "$mac" ] && exists "$host" env; then
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
        configure
        exit 0
    fi
fi
[ -n "$current" ] || die "interface $host (mac ${mac:-unknown}, pci ${pci:-none}) is not on the host"

if exists "$name" in_target; then
    die "the container already has an interface named $name; choose another interfaceName"
fi

# 4. Pin first: from here on, wherever the interface ends up, unprepare can find it.
do_pin
ip link set dev "$current" down 2>/dev/null
if ! out=$(ip link set dev "$current" netns "$pid" name "$name" 2>&1); then
    die "cannot move $current into the container as $name: $out"
fi
log "moved $current into the network namespace of pid $pid as $name"
configure
exit 0
