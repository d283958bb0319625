#!/bin/sh
# topodra CPU pinning hook: a CDI `createRuntime` hook, run by the OCI runtime on the host after
# the container's cgroup exists and before the workload starts. It confines the container to the
# exclusive CPUs the cpu.topodra.io driver chose, by writing its cpuset cgroup.
#
#   cpuset.sh <cpus> <mems|none>        container state JSON (with "pid", "bundle") on stdin
#
# CPUs: the union of this device's <cpus> and of every per-result TOPODRA_CPUS_<uid>_<device>
# entry in the bundle's config.json, so several CPU claims on one container add up whichever
# hook runs last. Memory nodes likewise from TOPODRA_MEMS_*; any "none" leaves memory alone.
# cgroup v1 (also hybrid): <cpuset mount><path of the cpuset line>/cpuset.cpus; cgroup v2:
# <cgroup2 mount><path of the 0:: line>/cpuset.cpus, enabling +cpuset in the ancestors'
# cgroup.subtree_control first. The result is read back from the effective file; any mismatch
# or failed write exits 1, which makes the runtime fail the container: a container that runs
# unpinned while its claim says it is pinned is the failure this hook exists to prevent.
#
# POSIX sh + sed, grep, sort, tr: nothing else is needed on the host. TOPODRA_PROC (default
# /proc) exists for tests that point the hook at a prepared tree.

set -u
set -f
PROC=${TOPODRA_PROC:-/proc}

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

[ $# -ge 1 ] || die "usage: cpuset.sh <cpus> [<mems>|none] (container state on stdin)"
cpus=$1
mems=${2:-none}
is_list "$cpus" || die "CPU list argument '$cpus' is not a CPU list"
[ "$mems" = none ] || is_list "$mems" || die "memory node argument '$mems' is not a list"

state=$(cat)
pid=$(printf '%s\n' "$state" | sed -n 's/.*"pid"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p' | head -n 1)
bundle=$(printf '%s\n' "$state" | sed -n 's/.*"bundle"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' | head -n 1)
[ -n "$pid" ] || die "no pid in the container state on stdin"

uid='[0-9A-F]{8}_[0-9A-F]{4}_[0-9A-F]{4}_[0-9A-F]{4}_[0-9A-F]{12}'
if [ -n "$bundle" ] && [ -r "$bundle/config.json" ]; then
	# every JSON string on a line of its own, then the per-result entries only
	for entry in $(tr '"' '\n' <"$bundle/config.json" | grep -E "^TOPODRA_(CPUS|MEMS)_${uid}_[A-Z0-9_]+=[0-9a-z,-]*\$"); do
		value=${entry#*=}
		case "$entry" in
		TOPODRA_CPUS_*)
			is_list "$value" || die "bad CPU list in $entry"
			cpus="$cpus,$value"
			;;
		TOPODRA_MEMS_*)
			if [ "$value" = none ] || [ "$mems" = none ]; then
				mems=none
			else
				is_list "$value" || die "bad memory node list in $entry"
				mems="$mems,$value"
			fi
			;;
		esac
	done
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
	write "$dir/cpuset.cpus" "$cpus"
	effective="$dir/cpuset.effective_cpus"
	[ -e "$effective" ] || effective="$dir/cpuset.cpus"
	check "$effective" "$cpus" "cpuset"
	if [ "$mems" != none ]; then
		write "$dir/cpuset.mems" "$mems"
		effective="$dir/cpuset.effective_mems"
		[ -e "$effective" ] || effective="$dir/cpuset.mems"
		check "$effective" "$mems" "cpuset.mems"
	fi
elif [ -n "$v2path" ] && [ -n "$v2mount" ]; then
	grep -qw cpuset "$v2mount/cgroup.controllers" 2>/dev/null ||
		die "the cpuset controller is not available in cgroup v2 at $v2mount"
	dir=$v2mount
	rest=${v2path#/}
	# enable cpuset for the children of every ancestor, root first
	old_ifs=$IFS
	IFS=/
	for part in $rest; do
		IFS=$old_ifs
		[ -n "$part" ] || continue
		if ! grep -qw cpuset "$dir/cgroup.subtree_control" 2>/dev/null; then
			write "$dir/cgroup.subtree_control" "+cpuset"
		fi
		dir="$dir/$part"
	done
	IFS=$old_ifs
	[ -d "$dir" ] || die "cgroup $dir of pid $pid does not exist"
	write "$dir/cpuset.cpus" "$cpus"
	check "$dir/cpuset.cpus.effective" "$cpus" "cpuset.cpus.effective"
	if [ "$mems" != none ]; then
		write "$dir/cpuset.mems" "$mems"
		check "$dir/cpuset.mems.effective" "$mems" "cpuset.mems.effective"
	fi
else
	die "pid $pid has no cpuset cgroup (v1) or unified cgroup (v2) in $cgfile / $PROC/mounts"
fi
exit 0
