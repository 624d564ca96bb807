package main

import (
	"fmt"
	"time"

	"github.com/fencedlease/fencedlease/test/controllers/writelog"
)

// clientGoRun: the same controller and the same pause on
// controller-runtime's stock leader election (a Lease lock, 15 s lease,
// 10 s renew deadline, 2 s retry period), with Widgets no fence guards.
func (cd *ctrlDemo) clientGoRun() error {
	r := &pauseRun{election: "client-go leader election", waits: "the election"}
	cd.step("The same controller on client-go's leader election (controller-runtime's defaults: 15s / 10s / 2s)")
	ns, err := cd.namespace("demo-leader-")
	if err != nil {
		return err
	}
	r.ns = ns
	if err := cd.applyManifest(ns, false); err != nil {
		return err
	}
	cd.say("Namespace %s: the same manifest without its FencedLease, the replicas run with --leader-elect", ns)
	explain("instead of --fenced-lease, and a Role for the election's Lease and Events. The fencing webhook is")
	explain("installed, but no FencedLease protects these Widgets: nothing checks a fence.")
	replicas, err := cd.startReplicas(ns)
	if err != nil {
		return err
	}
	if err := cd.createWidgets(ns); err != nil {
		return err
	}
	t0 := time.Now()
	leader, err := cd.waitLeader(ns, "", time.Minute)
	if err != nil {
		return err
	}
	r.a, r.b = replicas[leader], other(replicas, leader)
	cd.step(fmt.Sprintf("%s leads, and its controller wrote every Widget (%.1fs)", leader, time.Since(t0).Seconds()))
	cd.showWidgets(ns)
	if err := cd.sayFirstWrites(r); err != nil {
		return err
	}

	cd.step(fmt.Sprintf("%s is paused with SIGSTOP, until %s has taken the lease and written every Widget", r.a.Name, r.b.Name))
	explain("The other replica takes the Lease once 15 s have passed since the last renewal it saw.")
	r.pausedAt = time.Now()
	if err := r.a.Pause(); err != nil {
		return err
	}
	if _, err := cd.waitLeader(ns, r.a.Name, time.Minute); err != nil {
		return err
	}
	r.handoff = time.Since(r.pausedAt)
	cd.say("%s leads and wrote every Widget, %.1fs after the pause.", r.b.Name, r.handoff.Seconds())
	cd.showWidgets(ns)
	time.Sleep(time.Second) // b writes on

	if err := cd.resume(r); err != nil {
		return err
	}
	cd.runs = append(cd.runs, r)
	res := r.result
	cd.step(fmt.Sprintf("Split brain: %d of %s's writes after the resume were accepted",
		res.Late[writelog.Accepted]+res.Own[writelog.Accepted], r.a.Name))
	cd.say("late writes: %s", res.Late)
	cd.say("its controller's own, before its manager stopped: %s", res.Own)
	if n := sum(res.InFlight); n > 0 {
		explain("(%d more were sent before the pause and answered after it: %s)", n, res.InFlight)
	}
	cd.say("%d of %d Widgets now have a slot from %s's stale view (1000 and above), while %s leads:",
		res.Overwritten, widgetCount, r.a.Name, r.b.Name)
	cd.showWidgets(ns)
	return nil
}
