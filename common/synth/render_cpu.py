"""CPUs, caches and NUMA nodes as sysfs and procfs show them."""

from __future__ import annotations

from topodra.common.synth.masks import cpulist, cpumask
from topodra.common.synth.plan import Plan
from topodra.common.synth.tree import Tree

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"


def render_cpus(plan: Plan, tree: Tree) -> None:
    nbits = plan.nr_cpu_ids
    online = set(plan.online)
    present = [c.id for c in plan.cpus]
    offline_ids = [c.id for c in plan.cpus if not c.online] + list(range(len(plan.cpus), nbits))

    def on(cpus: tuple[int, ...]) -> list[int]:
        return [c for c in cpus if c in online]

    tree.file(f"{CPU}/online", cpulist(online))
    tree.file(f"{CPU}/possible", cpulist(range(nbits)))
    tree.file(f"{CPU}/present", cpulist(present))
    tree.file(f"{CPU}/offline", cpulist(offline_ids))
    tree.file(f"{CPU}/kernel_max", "8191")
    tree.file(f"{CPU}/isolated", "")
    smt = any(c.thread > 0 for c in plan.cpus)
    tree.file(f"{CPU}/smt/control", "on" if smt else "notsupported")
    tree.file(f"{CPU}/smt/active", "1" if any(c.thread > 0 and c.online for c in plan.cpus) else "0")

    by_core = {k.index: k for k in plan.cores}
    package_cpus: dict[int, list[int]] = {}
    die_cpus: dict[tuple[int, int], list[int]] = {}
    for c in plan.cpus:
        package_cpus.setdefault(c.socket, []).append(c.id)
        die_cpus.setdefault((c.socket, c.die), []).append(c.id)
    # the same strings serve many CPUs: format each set once
    memo: dict[tuple[int, ...], tuple[str, str]] = {}

    def fmt(cpus: list[int]) -> tuple[str, str]:
        key = tuple(cpus)
        if key not in memo:
            memo[key] = (cpumask(cpus, nbits), cpulist(cpus))
        return memo[key]

    cpu0_online_file = plan.spec.cpu.cpu0_hotpluggable
    driver = "amd-pstate-epp" if plan.spec.cpu.vendor == "AuthenticAMD" else "intel_pstate"
    for c in plan.cpus:
        d = f"{CPU}/cpu{c.id}"
        if c.id != 0 or cpu0_online_file:
            tree.file(f"{d}/online", "1" if c.online else "0")
        tree.link(f"{d}/node{c.node}", f"{NODE}/node{c.node}")
        tree.link(f"{d}/subsystem", "sys/bus/cpu")
        tree.link(f"sys/bus/cpu/devices/cpu{c.id}", d)
        if not c.online:
            continue  # the kernel removes topology/ and cache/ of an offline CPU
        t = f"{d}/topology"
        core = fmt(on(by_core[c.core].cpus))
        package = fmt(on(tuple(package_cpus[c.socket])))
        die = fmt(on(tuple(die_cpus[(c.socket, c.die)])))
        l2 = plan.caches[c.caches[2]]
        cluster = fmt(on(l2.cpus))
        tree.file(f"{t}/physical_package_id", str(c.socket))
        tree.file(f"{t}/die_id", str(c.die))
        tree.file(f"{t}/core_id", str(c.core_id))
        tree.file(f"{t}/cluster_id", str(l2.id))
        for name, (mask, lst) in (
            ("core_cpus", core),
            ("thread_siblings", core),
            ("package_cpus", package),
            ("core_siblings", package),
            ("die_cpus", die),
            ("cluster_cpus", cluster),
        ):
            tree.file(f"{t}/{name}", mask)
            tree.file(f"{t}/{name}_list", lst)
        for ci in c.caches:
            cache = plan.caches[ci]
            p = f"{d}/cache/index{cache.index}"
            mask, lst = fmt(on(cache.cpus))
            tree.file(f"{p}/level", str(cache.level))
            tree.file(f"{p}/type", cache.type)
            tree.file(f"{p}/id", str(cache.id))
            tree.file(f"{p}/size", f"{cache.size_kib}K")
            tree.file(f"{p}/coherency_line_size", "64")
            tree.file(f"{p}/ways_of_associativity", str(cache.ways))
            tree.file(f"{p}/number_of_sets", str(cache.size_kib * 1024 // (64 * cache.ways)))
            tree.file(f"{p}/physical_line_partition", "1")
            tree.file(f"{p}/shared_cpu_map", mask)
            tree.file(f"{p}/shared_cpu_list", lst)
        tree.file(f"{d}/cache/uevent", "")
        # cpufreq: hwloc tells hybrid core kinds apart by these frequencies
        q = f"{d}/cpufreq"
        tree.file(f"{q}/cpuinfo_max_freq", str(c.max_mhz * 1000))
        tree.file(f"{q}/cpuinfo_min_freq", "800000")
        tree.file(f"{q}/base_frequency", str(c.base_mhz * 1000))
        tree.file(f"{q}/scaling_cur_freq", str(c.base_mhz * 1000))
        tree.file(f"{q}/scaling_driver", driver)
        tree.file(f"{q}/scaling_governor", "performance")

    if plan.spec.cpu.hybrid:
        # the PMU devices that name the hybrid core types; hwloc and the kernel both read `cpus`
        for kind in ("core", "atom"):
            cpus = [c.id for c in plan.cpus if c.kind == kind and c.online]
            if cpus:
                tree.file(f"sys/devices/cpu_{kind}/cpus", cpulist(cpus))
                tree.link(f"sys/bus/event_source/devices/cpu_{kind}", f"sys/devices/cpu_{kind}")


def render_nodes(plan: Plan, tree: Tree) -> None:
    online = set(plan.online)
    ids = [n.id for n in plan.nodes]
    tree.file(f"{NODE}/online", cpulist(ids))
    tree.file(f"{NODE}/possible", cpulist(ids))
    tree.file(f"{NODE}/has_cpu", cpulist(n.id for n in plan.nodes if any(c in online for c in n.cpus)))
    tree.file(f"{NODE}/has_memory", cpulist(n.id for n in plan.nodes if n.memory_kib))
    tree.file(f"{NODE}/has_normal_memory", cpulist(n.id for n in plan.nodes if n.memory_kib))
    for n in plan.nodes:
        d = f"{NODE}/node{n.id}"
        cpus = [c for c in n.cpus if c in online]
        tree.file(f"{d}/cpumap", cpumask(cpus, plan.nr_cpu_ids))
        tree.file(f"{d}/cpulist", cpulist(cpus))
        tree.file(f"{d}/distance", " ".join(map(str, n.distances)))
        tree.raw(f"{d}/meminfo", _node_meminfo(n.id, n.memory_kib))
        tree.raw(
            f"{d}/numastat",
            "numa_hit 0\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 0\nlocal_node 0\nother_node 0\n",
        )
        for size in (2048, 1048576):
            h = f"{d}/hugepages/hugepages-{size}kB"
            for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                tree.file(f"{h}/{name}", "0")
        for c in n.cpus:
            tree.link(f"{d}/cpu{c}", f"{CPU}/cpu{c}")
        tree.link(f"sys/bus/node/devices/node{n.id}", d)


def _node_meminfo(node: int, total_kib: int) -> str:
    free = total_kib * 9 // 10
    rows = [
        ("MemTotal", total_kib),
        ("MemFree", free),
        ("MemUsed", total_kib - free),
        ("SwapCached", 0),
        ("Active", 0),
        ("Inactive", 0),
        ("Unevictable", 0),
        ("Mlocked", 0),
        ("Dirty", 0),
        ("Writeback", 0),
        ("FilePages", 0),
        ("Mapped", 0),
        ("AnonPages", 0),
        ("Shmem", 0),
        ("KernelStack", 0),
        ("PageTables", 0),
        ("Slab", 0),
        ("SReclaimable", 0),
        ("SUnreclaim", 0),
        ("AnonHugePages", 0),
    ]
    lines = [f"Node {node} {f'{name}:':<15} {value:>8} kB" for name, value in rows]
    lines += [
        f"Node {node} HugePages_Total:     0",
        f"Node {node} HugePages_Free:      0",
        f"Node {node} HugePages_Surp:      0",
    ]
    return "\n".join(lines) + "\n"


def render_cpuinfo(plan: Plan, tree: Tree) -> None:
    """x86 /proc/cpuinfo for the online CPUs; readers take model names and ids from it."""
    spec = plan.spec.cpu
    siblings: dict[int, int] = {}
    cores: dict[int, set[int]] = {}
    for c in plan.cpus:
        if c.online:
            siblings[c.socket] = siblings.get(c.socket, 0) + 1
            cores.setdefault(c.socket, set()).add(c.core)
    flags = (
        "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2"
    )
    if any(c.thread > 0 for c in plan.cpus):
        flags += " ht"
    flags += (
        " syscall nx lm constant_tsc rep_good nopl xtopology cpuid pni ssse3 fma cx16 sse4_1 sse4_2 x2apic"
    )
    flags += " popcnt aes xsave avx f16c rdrand hypervisor lahf_lm avx2 bmi1 bmi2 avx512f"
    blocks = []
    for c in plan.cpus:
        if not c.online:
            continue
        l3 = plan.caches[c.caches[3]]
        blocks.append(
            "\n".join(
                [
                    f"processor\t: {c.id}",
                    f"vendor_id\t: {spec.vendor}",
                    f"cpu family\t: {spec.family}",
                    f"model\t\t: {spec.model}",
                    f"model name\t: {spec.model_name}",
                    f"stepping\t: {spec.stepping}",
                    f"cpu MHz\t\t: {spec.mhz:.3f}",
                    f"cache size\t: {l3.size_kib} KB",
                    f"physical id\t: {c.socket}",
                    f"siblings\t: {siblings[c.socket]}",
                    f"core id\t\t: {c.core_id}",
                    f"cpu cores\t: {len(cores[c.socket])}",
                    f"apicid\t\t: {c.apicid}",
                    f"initial apicid\t: {c.apicid}",
                    "fpu\t\t: yes",
                    "fpu_exception\t: yes",
                    "cpuid level\t: 32",
                    "wp\t\t: yes",
                    f"flags\t\t: {flags}",
                    f"bogomips\t: {spec.mhz * 2:.2f}",
                    "clflush size\t: 64",
                    "cache_alignment\t: 64",
                    "address sizes\t: 46 bits physical, 57 bits virtual",
                    "power management:",
                ]
            )
            + "\n"
        )
    tree.raw("proc/cpuinfo", "\n".join(blocks) + "\n")
    total = sum(n.memory_kib for n in plan.nodes)
    free = total * 9 // 10
    tree.raw(
        "proc/meminfo",
        f"MemTotal:       {total:>10} kB\nMemFree:        {free:>10} kB\nMemAvailable:   {free:>10} kB\n"
        "Buffers:                 0 kB\nCached:                  0 kB\nSwapTotal:               0 kB\n"
        "SwapFree:                0 kB\nHugePages_Total:       0\nHugePages_Free:        0\n"
        "Hugepagesize:       2048 kB\n",
    )
