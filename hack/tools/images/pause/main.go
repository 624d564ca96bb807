// Command pause is the sandbox image of the local cluster's real nodes: it
// holds a pod's namespaces and waits for SIGTERM or SIGINT, as Kubernetes'
// pause container does. Built static, it is the image's only file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
