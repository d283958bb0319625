// Command kubelet-bench calls a DRA plugin's NodePrepareResources/NodeUnprepareResources the way
// the kubelet does (grpc.NewClient on "unix:<socket>", insecure credentials, one call per pod and
// driver) and prints latency and throughput figures as one JSON object.
//
// Why Go: the real caller is the kubelet, a Go program. A Python stand-in on the same two cores
// spends CPU and the GIL of its own, which the figures would then charge to the driver.
//
// Claims come on stdin, one "namespace name uid" per line. Phases:
//   - latency: the first -latency claims one after the other, each unprepared right after;
//     p50/p99 of the prepare calls (the first -warmup are not counted).
//   - sustained: every claim through -concurrency calls in flight (the held set grows), then all
//     unprepared; claims per second over the prepares.
//   - rounds: -rounds times, the first -concurrency claims at once from nothing held, then
//     unprepared; claims per second of each round.
//   - held: the claims after the first -concurrency, up to -hold of them, prepared and kept
//     (not timed), then -rounds rounds as above while they are held, then all unprepared.
//
// -phases picks which run, in this order (default: latency,sustained,rounds).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

type claim struct{ namespace, name, uid string }

type figures struct {
	Client          string    `json:"client"`
	Latency         latency   `json:"latency"`
	ClaimsPerS      float64   `json:"claims_per_s"`
	ClaimsPerSRound []float64 `json:"claims_per_s_rounds"`
	RoundsMedian    float64   `json:"claims_per_s_rounds_median"`
	Held            int       `json:"held,omitempty"`
	HeldRounds      []float64 `json:"claims_per_s_rounds_held,omitempty"`
	HeldMedian      float64   `json:"claims_per_s_rounds_held_median,omitempty"`
}

type latency struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	N    int     `json:"n"`
}

// callTimeout is the kubelet's per-call deadline (defaultClientCallTimeout).
const callTimeout = 45 * time.Second

func main() {
	socket := flag.String("socket", "", "the plugin's DRA socket")
	nLatency := flag.Int("latency", 500, "sequential prepares for the latency figures")
	warmup := flag.Int("warmup", 20, "first sequential prepares not counted")
	concurrency := flag.Int("concurrency", 64, "calls in flight")
	rounds := flag.Int("rounds", 5, "rounds of -concurrency prepares from nothing held")
	hold := flag.Int("hold", 1000, "claims held during the held phase")
	phases := flag.String("phases", "latency,sustained,rounds", "comma-separated: latency, sustained, rounds, held")
	flag.Parse()
	run := map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		switch p {
		case "latency", "sustained", "rounds", "held":
			run[p] = true
		default:
			fail("unknown phase %q", p)
		}
	}
	if *socket == "" {
		fail("-socket is required")
	}
	claims := readClaims()
	conn, err := grpc.NewClient("unix:"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("dial %s: %v", *socket, err)
	}
	defer conn.Close()
	client := drapb.NewDRAPluginClient(conn)

	out := figures{Client: "go"}
	if run["latency"] {
		out.Latency = sequential(client, claims[:min(*nLatency, len(claims))], *warmup)
	}
	if run["sustained"] {
		out.ClaimsPerS = throughput(client, claims, *concurrency)
	}
	first := claims[:min(*concurrency, len(claims))]
	if run["rounds"] {
		for r := 0; r < *rounds; r++ {
			out.ClaimsPerSRound = append(out.ClaimsPerSRound, throughput(client, first, *concurrency))
		}
		out.RoundsMedian = median(out.ClaimsPerSRound)
	}
	if run["held"] {
		held := claims[len(first):min(len(first)+*hold, len(claims))]
		each(held, *concurrency, func(c claim) { prepare(client, c) })
		out.Held = len(held)
		for r := 0; r < *rounds; r++ {
			out.HeldRounds = append(out.HeldRounds, throughput(client, first, *concurrency))
		}
		out.HeldMedian = median(out.HeldRounds)
		each(held, *concurrency, func(c claim) { unprepare(client, c) })
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("write figures: %v", err)
	}
}

func median(values []float64) float64 {
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	if len(sorted) == 0 {
		return 0
	}
	return sorted[len(sorted)/2]
}

func readClaims() []claim {
	var claims []claim
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		f := strings.Fields(scanner.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			fail("claim line %q: want \"namespace name uid\"", scanner.Text())
		}
		claims = append(claims, claim{f[0], f[1], f[2]})
	}
	if err := scanner.Err(); err != nil {
		fail("read claims: %v", err)
	}
	if len(claims) == 0 {
		fail("no claims on stdin")
	}
	return claims
}

func prepare(client drapb.DRAPluginClient, c claim) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := client.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.namespace, Name: c.name, Uid: c.uid}},
	})
	if err != nil {
		fail("prepare %s/%s: %v", c.namespace, c.name, err)
	}
	got, ok := resp.Claims[c.uid]
	if !ok {
		fail("prepare %s/%s: no answer for uid %s", c.namespace, c.name, c.uid)
	}
	if got.Error != "" {
		fail("prepare %s/%s: %s", c.namespace, c.name, got.Error)
	}
}

func unprepare(client drapb.DRAPluginClient, c claim) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.namespace, Name: c.name, Uid: c.uid}},
	})
	if err != nil {
		fail("unprepare %s/%s: %v", c.namespace, c.name, err)
	}
	if got := resp.Claims[c.uid]; got == nil || got.Error != "" {
		fail("unprepare %s/%s: %v", c.namespace, c.name, got)
	}
}

func sequential(client drapb.DRAPluginClient, claims []claim, warmup int) latency {
	var samples []float64
	for i, c := range claims {
		start := time.Now()
		prepare(client, c)
		took := time.Since(start)
		unprepare(client, c)
		if i >= warmup {
			samples = append(samples, float64(took.Microseconds())/1000)
		}
	}
	if len(samples) == 0 {
		return latency{}
	}
	sort.Float64s(samples)
	sum := 0.0
	for _, s := range samples {
		sum += s
	}
	return latency{P50: pct(samples, 0.50), P99: pct(samples, 0.99), Mean: sum / float64(len(samples)), N: len(samples)}
}

// pct is the nearest-rank percentile of sorted samples (as hack/bench-prepare computes it).
func pct(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(i, len(sorted)-1)]
}

// each runs fn on every claim with `workers` calls in flight and returns the elapsed time.
func each(claims []claim, workers int, fn func(claim)) time.Duration {
	work := make(chan claim)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				fn(c)
			}
		}()
	}
	for _, c := range claims {
		work <- c
	}
	close(work)
	wg.Wait()
	return time.Since(start)
}

// throughput prepares every claim with `workers` calls in flight (the held set grows to all of
// them), then unprepares them all; claims per second over the prepares.
func throughput(client drapb.DRAPluginClient, claims []claim, workers int) float64 {
	took := each(claims, workers, func(c claim) { prepare(client, c) })
	each(claims, workers, func(c claim) { unprepare(client, c) })
	return float64(len(claims)) / took.Seconds()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubelet-bench: "+format+"\n", args...)
	os.Exit(1)
}
