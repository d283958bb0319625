// Command ghw-inspect is the Go discovery peer of `topodra inspect --output json` in
// hack/bench/peer: it reads the same sysfs tree with github.com/jaypipes/ghw (NUMA topology with
// cores and caches, PCI functions, NICs, GPUs, accelerators) and prints what it found as JSON.
//
// Usage: ghw-inspect [-root DIR]. Product names are not looked up (neither does topodra's JSON):
// ghw gets an empty PCI database, so no pci.ids file is read and nothing is fetched. A part ghw
// cannot read in a tree is reported in "errors", not fatal, so every tree gives a figure.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/jaypipes/ghw"
	"github.com/jaypipes/pcidb"
)

func main() {
	root := flag.String("root", "/", "the root the tree's sys/ and proc/ are under")
	flag.Parse()
	empty := &pcidb.PCIDB{
		Classes:  map[string]*pcidb.Class{},
		Vendors:  map[string]*pcidb.Vendor{},
		Products: map[string]*pcidb.Product{},
	}
	ctx := context.Background()
	for _, m := range []ghw.Modifier{ghw.WithChroot(*root), ghw.WithDisableTools(), ghw.WithPCIDB(empty), ghw.WithDisableWarnings()} {
		ctx = m(ctx)
	}
	out := map[string]any{}
	errs := map[string]string{}
	keep := func(name string, v any, err error) {
		if err != nil {
			errs[name] = err.Error()
			return
		}
		out[name] = v
	}
	topo, err := ghw.Topology(ctx)
	keep("topology", topo, err)
	pci, err := ghw.PCI(ctx)
	keep("pci", pci, err)
	nets, err := ghw.Network(ctx)
	keep("network", nets, err)
	gpus, err := ghw.GPU(ctx)
	keep("gpu", gpus, err)
	accels, err := ghw.Accelerator(ctx)
	keep("accelerator", accels, err)
	out["errors"] = errs
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "ghw-inspect: %v\n", err)
		os.Exit(1)
	}
}
