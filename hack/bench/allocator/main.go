// Command allocator-steps runs the structured DRA allocator that kube-scheduler 1.37.2 runs in
// its DynamicResources Filter (k8s.io/dynamic-resource-allocation/structured, same version as
// the control plane of tests/controlplane) on one node's ResourceSlices and a sequence of claims,
// and prints, per claim, what it allocated, how many search steps (allocateOne calls) it took and
// how long.
//
// Why: the scheduler does not report how much of its exhaustive search a claim costs, only
// whether the Filter finished within its timeout (10 s per node by default). Claim templates with
// prioritized lists (firstAvailable) multiply that search; this measures by how much, with the
// upstream code itself rather than a model of it.
//
// Input (stdin, JSON): {"node": NAME, "slices": [ResourceSlice], "classes": [DeviceClass],
// "claims": [ResourceClaim], "timeout_s": SECONDS, "keep": BOOL}. Claims are allocated one after
// the other on the node; with "keep" each allocation stays in place for the next claim (as the
// placement study's jobs do), otherwise every claim sees the node empty.
//
// Output (stdout, JSON): {"allocator": CHANNEL, "claims": [{"name", "allocated", "results",
// "steps", "seconds", "error"}]}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type input struct {
	Node     string                       `json:"node"`
	Slices   []*resourceapi.ResourceSlice `json:"slices"`
	Classes  []*resourceapi.DeviceClass   `json:"classes"`
	Claims   []*resourceapi.ResourceClaim `json:"claims"`
	TimeoutS float64                      `json:"timeout_s"`
	Keep     bool                         `json:"keep"`
	// Allocated: devices already allocated on the node (allocation results of earlier claims).
	Allocated []resourceapi.AllocationResult `json:"allocated"`
}

type result struct {
	Name      string                                      `json:"name"`
	Allocated bool                                        `json:"allocated"`
	Results   []resourceapi.DeviceRequestAllocationResult `json:"results,omitempty"`
	Steps     int64                                       `json:"steps"`
	Seconds   float64                                     `json:"seconds"`
	TimedOut  bool                                        `json:"timed_out"`
	Error     string                                      `json:"error,omitempty"`
}

type output struct {
	Allocator string   `json:"allocator"`
	Claims    []result `json:"claims"`
}

type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, v := range c {
		out = append(out, v)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if v, ok := c[name]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("deviceclass %q not found", name)
}

// features are what the scheduler derives from the 1.37 default gates (and the gates
// tests/controlplane sets): with consumable capacity on, it picks the "incubating" allocator.
var features = structured.Features{
	AdminAccess:            true,
	PrioritizedList:        true,
	PartitionableDevices:   true,
	DeviceTaints:           true,
	DeviceBindingAndStatus: true,
	ConsumableCapacity:     true,
}

// steps reads the allocator's own count of allocateOne calls (GetStats returns a type of an
// internal package, so it is read by reflection).
func steps(a structured.Allocator) int64 {
	m := reflect.ValueOf(a).MethodByName("GetStats")
	if !m.IsValid() {
		return -1
	}
	stats := m.Call(nil)[0]
	f := stats.FieldByName("NumAllocateOneInvocations")
	if !f.IsValid() {
		return -1
	}
	return f.Int()
}

func channel(a structured.Allocator) string {
	m := reflect.ValueOf(a).MethodByName("Channel")
	if !m.IsValid() {
		return "unknown"
	}
	return m.Call(nil)[0].String()
}

func record(state *structured.AllocatedState, alloc *resourceapi.AllocationResult) {
	for _, r := range alloc.Devices.Results {
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			state.AllocatedDevices.Insert(id)
			continue
		}
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		if r.ConsumedCapacity != nil {
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
}

// defaults fills in what kube-apiserver defaults in a stored claim (allocationMode ExactCount,
// count 1), so that claims can be given as users write them.
func defaults(claim *resourceapi.ResourceClaim) {
	set := func(mode *resourceapi.DeviceAllocationMode, count *int64) {
		if *mode == "" {
			*mode = resourceapi.DeviceAllocationModeExactCount
		}
		if *mode == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
			*count = 1
		}
	}
	for i := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			set(&r.Exactly.AllocationMode, &r.Exactly.Count)
		}
		for j := range r.FirstAvailable {
			set(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
		}
	}
}

func run() error {
	var in input
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("input: %w", err)
	}
	if in.Node == "" {
		return errors.New("input: node is empty")
	}
	cls := classes{}
	for _, c := range in.Classes {
		cls[c.Name] = c
	}
	timeout := time.Duration(in.TimeoutS * float64(time.Second))
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Node}}
	fresh := func() structured.AllocatedState {
		st := structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		}
		for i := range in.Allocated {
			record(&st, &in.Allocated[i])
		}
		return st
	}
	state := fresh()
	cache := cel.NewCache(100, cel.Features{EnableConsumableCapacity: true})
	out := output{}
	for i, claim := range in.Claims {
		if claim.UID == "" {
			claim.UID = types.UID(fmt.Sprintf("uid-%d", i))
		}
		defaults(claim)
		current := state
		if !in.Keep {
			current = fresh()
		}
		a, err := structured.NewAllocator(context.Background(), features, current, cls, in.Slices, cache)
		if err != nil {
			return fmt.Errorf("claim %s: %w", claim.Name, err)
		}
		out.Allocator = channel(a)
		ctx := context.Background()
		cancel := func() {}
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, timeout)
		}
		began := time.Now()
		res, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
		took := time.Since(began)
		cancel()
		r := result{Name: claim.Name, Steps: steps(a), Seconds: took.Seconds()}
		switch {
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			r.TimedOut = true
			r.Error = err.Error()
		case err != nil:
			r.Error = err.Error()
		case len(res) == 1:
			r.Allocated = true
			r.Results = res[0].Devices.Results
			if in.Keep {
				record(&state, &res[0])
			}
		}
		out.Claims = append(out.Claims, r)
	}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(out)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "allocator-steps:", err)
		os.Exit(1)
	}
}
