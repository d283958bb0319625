#!/bin/sh
# topodra CPU pinning hook: a CDI `createRuntime` hook, run by the OCI runtime on the host after
# the container's cgroup exists and before the workload starts. It confines the container to the
# exclusive CPUs the cpu.topodra.io driver chose, by writing its cpuset cgroup.
#
#   cpuset.sh <cpus> <mems|none>        container state JSON (with "pid", "bundle") on stdin
#
# One hook runs per prepared CPU device the container got (CDI adds one per device), one after
# the other. Each adds its CPUs (and memory nodes) to a record in the container's bundle folder
# and writes the union so far, so a container with several CPU claims ends on all of their CPUs
# and one with a single claim on exactly its CPUs. Nothing is read from the container's own
# configuration: its environment is the user's to set, and must not widen the cpuset.
# Memory nodes: "none" from any device leaves memory unrestricted (the parent's nodes).
#
# cgroup v1 (also hybrid): <cpuset mount><path of the cpuset line>/cpuset.cpus; cgroup v2:
# <cgroup2 mount><path of the 0:: line>/cpuset.cpus, enabling +cpuset in the ancestors'
# cgroup.subtree_control first. The result is read back from the effective file; any mismatch
# or failed write exits 1, which makes the runtime fail the container: a container that runs
# unpinned while its claim says it is pinned is the failure this hook exists to prevent.
#
# POSIX sh + sed, grep, sort, tr, head: nothing else is needed on the host. TOPODRA_PROC
# (default /proc) exists for tests that point the hook at a prepared tree.

set -u
set -f
PROC=${TOPODRA_PROC:-/proc}
RECORD=topodra-cpuset.state

die() {
	echo "topodra cpuset hook: $*" >&2
	exit 1
}

is_list() {
	case "$1" in
	'' | *[!0-9,-]*) return 1 ;;
	esac
	return 0
}

# "0-2,5" -> "0,1,2,5" (sorted, unique): one spelling, so lists compare as sets
normalize() {
	printf '%s\n' "$1" | tr ',' '\n' | while IFS=- read -r lo hi; do
		[ -n "$lo" ] || continue
		hi=${hi:-$lo}
		i=$lo
		while [ "$i" -le "$hi" ]; do
			echo "$i"
			i=$((i + 1))
		done
	done | sort -n -u | tr '\n' ',' | sed 's/,$//'
}

write() { # file value
	printf '%s\n' "$2" >"$1" || die "cannot write '$2' to $1"
}

check() { # file expected-normalized what
	got=$(cat "$1" 2>/dev/null) || die "cannot read back $1"
	[ "$(normalize "$got")" = "$2" ] || die "$3 is '$got' after writing '$2' ($1)"
}

# The first top-level value of a key in the runtime's state JSON. The state lists ociVersion,
# id, status, pid and bundle before annotations, which come from the pod and must not win.
state_value() { # key
	printf '%s\n' "$state" | tr ',{}' '\n\n\n' |
		sed -n "s/^[[:space:]]*\"$1\"[[:space:]]*:[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*\$/\1/p" |
		head -n 1
}

[ $# -ge 1 ] || die "usage: cpuset.sh <cpus> [<mems>|none] (container state on stdin)"
cpus=$1
mems=${2:-none}
is_list "$cpus" || die "CPU list argument '$cpus' is not a CPU list"
[ "$mems" = none ] || is_list "$mems" || die "memory node argument '$mems' is not a list"

state=$(cat)
pid=$(state_value pid)
bundle=$(state_value bundle)
case "$pid" in
'' | *[!0-9]*) die "no pid in the container state on stdin" ;;
esac

# what earlier hooks of this container recorded
had_mems=no
if [ -n "$bundle" ] && [ -r "$bundle/$RECORD" ]; then
	while IFS='=' read -r key value; do
		case "$key" in
		cpus) is_list "$value" && cpus="$cpus,$value" ;;
		mems)
			had_mems=yes
			if [ "$value" = none ] || ! is_list "$value"; then
				mems=none
			elif [ "$mems" != none ]; then
				mems="$mems,$value"
			fi
			;;
		esac
	done <"$bundle/$RECORD"
fi
cpus=$(normalize "$cpus")
[ "$mems" = none ] || mems=$(normalize "$mems")

cgfile="$PROC/$pid/cgroup"
[ -r "$cgfile" ] || die "cannot read $cgfile"
v1path=
v2path=
while IFS=: read -r hid controllers path; do
	case ",$controllers," in
	*,cpuset,*) v1path=$path ;;
	esac
	if [ "$hid" = 0 ] && [ -z "$controllers" ]; then
		v2path=$path
	fi
done <"$cgfile"

v1mount=
v2mount=
while read -r _dev mnt fstype opts _rest; do
	case "$fstype" in
	cgroup)
		case ",$opts," in
		*,cpuset,*) v1mount=$mnt ;;
		esac
		;;
	cgroup2) v2mount=$mnt ;;
	esac
done <"$PROC/mounts"

if [ -n "$v1path" ] && [ -n "$v1mount" ]; then
	dir="$v1mount${v1path%/}"
	[ -d "$dir" ] || die "cpuset cgroup $dir of pid $pid does not exist"
	cpus_file=cpuset.cpus
	cpus_effective=cpuset.effective_cpus
	mems_file=cpuset.mems
	mems_effective=cpuset.effective_mems
	parent_mems=cpuset.mems
elif [ -n "$v2path" ] && [ -n "$v2mount" ]; then
	grep -qw cpuset "$v2mount/cgroup.controllers" 2>/dev/null ||
		die "the cpuset controller is not available in cgroup v2 at $v2mount"
	dir=$v2mount
	# enable cpuset for the children of every ancestor, root first
	old_ifs=$IFS
	IFS=/
	for part in ${v2path#/}; do
		IFS=$old_ifs
		[ -n "$part" ] || continue
		if ! grep -qw cpuset "$dir/cgroup.subtree_control" 2>/dev/null; then
			write "$dir/cgroup.subtree_control" "+cpuset"
		fi
		dir="$dir/$part"
	done
	IFS=$old_ifs
	[ -d "$dir" ] || die "cgroup $dir of pid $pid does not exist"
	cpus_file=cpuset.cpus
	cpus_effective=cpuset.cpus.effective
	mems_file=cpuset.mems
	mems_effective=cpuset.mems.effective
	parent_mems=cpuset.mems.effective
else
	die "pid $pid has no cpuset cgroup (v1) or unified cgroup (v2) in $cgfile / $PROC/mounts"
fi

write "$dir/$cpus_file" "$cpus"
[ -e "$dir/$cpus_effective" ] || cpus_effective=$cpus_file
check "$dir/$cpus_effective" "$cpus" "$cpus_effective"
if [ "$mems" != none ]; then
	write "$dir/$mems_file" "$mems"
	[ -e "$dir/$mems_effective" ] || mems_effective=$mems_file
	check "$dir/$mems_effective" "$mems" "$mems_effective"
elif [ "$had_mems" = yes ]; then
	# an earlier hook restricted memory; this device's CPUs want none: back to the parent's
	all=$(cat "${dir%/*}/$parent_mems" 2>/dev/null) || die "cannot read ${dir%/*}/$parent_mems"
	write "$dir/$mems_file" "$all"
fi

if [ -n "$bundle" ] && [ -d "$bundle" ]; then
	printf 'cpus=%s\nmems=%s\n' "$cpus" "$mems" >"$bundle/$RECORD" ||
		die "cannot record the pinned CPUs in $bundle/$RECORD"
fi
exit 0
