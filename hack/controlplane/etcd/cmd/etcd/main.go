// Command etcd is the stock etcd server: the same entry point etcd's own binary uses, built from
// the published go.etcd.io/etcd/server/v3 module so no release tarball or image is needed.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
