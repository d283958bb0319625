// worker: the latency-sensitive side of hack/bench/exclusive. A closed request loop: each
// request is a fixed amount of CPU work, timed on the monotonic clock; after -duration it prints
// one JSON line with the request count, latency percentiles, the CPUs it was allowed, and what
// its cgroup and the kernel say it cost (CPU time, involuntary context switches).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var sink uint64

// work is one request: a dependent chain of multiply-adds the compiler cannot drop.
func work(n int) {
	x := sink | 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink = x
}

func field(path, key string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, key+":") {
			return strings.TrimSpace(strings.TrimPrefix(line, key+":"))
		}
	}
	return ""
}

// cgroupDir is this container's cpuacct (v1) or unified (v2) folder as the runtime mounts it.
func cgroupDir() (string, string) {
	for _, d := range []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct"} {
		if _, err := os.Stat(filepath.Join(d, "cpuacct.usage")); err == nil {
			return d, "v1"
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu.stat"); err == nil {
		return "/sys/fs/cgroup", "v2"
	}
	return "", ""
}

func cgroupCPU(dir, version string) int64 {
	switch version {
	case "v1":
		data, _ := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err == nil {
			return v
		}
	case "v2":
		us := field(filepath.Join(dir, "cpu.stat"), "usage_usec")
		if f := strings.Fields(us); len(f) > 0 {
			v, err := strconv.ParseInt(f[0], 10, 64)
			if err == nil {
				return v * 1000
			}
		}
	}
	return -1
}

// cgroupInvoluntary sums nonvoluntary_ctxt_switches over every task of the cgroup (the worker's
// threads: the container runs nothing else).
func cgroupInvoluntary(dir string) int64 {
	data, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		data, err = os.ReadFile(filepath.Join(dir, "cgroup.threads"))
		if err != nil {
			return -1
		}
	}
	var total int64
	for _, tid := range strings.Fields(string(data)) {
		v := field(fmt.Sprintf("/proc/%s/status", tid), "nonvoluntary_ctxt_switches")
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			total += n
		}
	}
	return total
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return float64(sorted[i].Nanoseconds()) / 1e3
}

func main() {
	duration := flag.Duration("duration", 15*time.Second, "how long to send requests")
	n := flag.Int("work", 20000, "multiply-adds per request")
	flag.Parse()

	dir, version := cgroupDir()
	cpu0 := cgroupCPU(dir, version)
	inv0 := cgroupInvoluntary(dir)
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)

	lat := make([]time.Duration, 0, 1<<20)
	start := time.Now()
	deadline := start.Add(*duration)
	for {
		t := time.Now()
		if t.After(deadline) {
			break
		}
		work(*n)
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start).Seconds()

	cpu1 := cgroupCPU(dir, version)
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	out := map[string]any{
		"requests":           len(lat),
		"seconds":            elapsed,
		"rps":                float64(len(lat)) / elapsed,
		"p50_us":             pct(lat, 0.50),
		"p99_us":             pct(lat, 0.99),
		"p999_us":            pct(lat, 0.999),
		"max_us":             pct(lat, 1.0),
		"cpus_allowed":       field("/proc/self/status", "Cpus_allowed_list"),
		"cgroup":             version,
		"rusage_cpu_s":       tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime),
		"rusage_involuntary": ru1.Nivcsw - ru0.Nivcsw,
		"rusage_voluntary":   ru1.Nvcsw - ru0.Nvcsw,
		"sink":               sink & 1,
	}
	if cpu0 >= 0 && cpu1 >= 0 {
		out["cgroup_cpu_s"] = float64(cpu1-cpu0) / 1e9
	}
	if inv1 := cgroupInvoluntary(dir); inv0 >= 0 && inv1 >= 0 {
		out["cgroup_involuntary"] = inv1 - inv0
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
