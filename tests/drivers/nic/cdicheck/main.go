// cdicheck loads CDI specs with the reference CDI library (the one containerd and CRI-O use)
// and prints the OCI runtime spec that injecting the given devices produces.
//
//	cdicheck <spec-dir> <vendor/class=device>...
//
// Exit codes: 2 cache error, 3 a spec in the folder was rejected, 4 injection failed.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: cdicheck <spec-dir> <device>...")
		os.Exit(1)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(os.Args[1]), cdi.WithAutoRefresh(false))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cache:", err)
		os.Exit(2)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		for path, e := range errs {
			fmt.Fprintln(os.Stderr, "spec error:", path, e)
		}
		os.Exit(3)
	}
	spec := &oci.Spec{Version: oci.Version, Linux: &oci.Linux{}, Process: &oci.Process{}}
	if _, err := cache.InjectDevices(spec, os.Args[2:]...); err != nil {
		fmt.Fprintln(os.Stderr, "inject:", err)
		os.Exit(4)
	}
	if err := json.NewEncoder(os.Stdout).Encode(spec); err != nil {
		fmt.Fprintln(os.Stderr, "encode:", err)
		os.Exit(5)
	}
}
