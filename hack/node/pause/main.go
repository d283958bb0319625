// Command pause is the first process of every Pod sandbox in the real-node test tier: it holds
// the Pod's namespaces open, reaps any orphan re-parented to it (it is PID 1 when the Pod shares
// its PID namespace) and exits when the runtime stops the sandbox. The tier writes it into its
// own OCI image, so no registry is needed to run a Pod.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 8)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			reap()
		}
	}
}

// reap collects every exited child without blocking, so none stays a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
