//go:build scale

package scale_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// runClientGoGroups runs groups client-go elections of candidates each in
// namespace ns with leaderelection's default timing (15 s / 10 s / 2 s),
// until ctx ends; it returns once every group has a leader.
func runClientGoGroups(ctx context.Context, cfg *rest.Config, ns string, groups, candidates int) (*sync.WaitGroup, error) {
	c := *cfg
	c.QPS, c.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(&c)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	led := make(chan struct{}, groups*candidates)
	for g := range groups {
		for i := range candidates {
			lock := &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cg-%d", g)},
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: fmt.Sprintf("cg-%d-%d", g, i)},
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
					Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(context.Context) { led <- struct{}{} },
						OnStoppedLeading: func() {},
					},
				})
			}()
		}
	}
	deadline := time.After(2 * time.Minute)
	for range groups {
		select {
		case <-led:
		case <-deadline:
			return &wg, fmt.Errorf("not every client-go group elected a leader within 2 minutes")
		}
	}
	return &wg, nil
}
