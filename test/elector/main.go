// Command elector is client-go's leader election in a container, for the
// benchmark that sets it beside fencedlease on a real node
// (test/e2e TestProcessKnows): it campaigns for a Lease with client-go's
// usual timings and writes "leading" when its OnStartedLeading callback runs
// and "stopped leading" when OnStoppedLeading does, so that the container
// runtime's log times when the process knows. SIGTERM cancels its campaign
// (releasing the Lease only with --release-on-cancel).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	lease := flag.String("lease", "elector", "The Lease to campaign for.")
	namespace := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "The Lease's namespace.")
	identity := flag.String("identity", os.Getenv("POD_NAME"), "This candidate's identity.")
	release := flag.Bool("release-on-cancel", false, "Release the Lease when told to stop (client-go's default: keep it until it expires).")
	flag.Parse()
	if err := run(*lease, *namespace, *identity, *release); err != nil {
		fmt.Fprintln(os.Stderr, "elector:", err)
		os.Exit(1)
	}
}

func run(lease, namespace, identity string, release bool) error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, lease, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: identity})
	if err != nil {
		return err
	}
	fmt.Println("campaigning")
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock,
		// client-go's usual timings (its example's, controller-runtime's
		// defaults).
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: release,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { fmt.Println("leading") },
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
		},
	})
	return nil
}
