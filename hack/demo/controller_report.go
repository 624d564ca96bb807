package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/fencedlease/fencedlease/test/controllers/writelog"
)

func (cd *ctrlDemo) summary() {
	cd.step("Summary: the replica that acted, paused past its lease and resumed")
	row := "    %-44s"
	fmt.Printf("\n"+row, "")
	for _, r := range cd.runs {
		fmt.Printf(" %-32s", r.election)
	}
	line := func(name string, cell func(r *pauseRun) string) {
		fmt.Printf("\n"+row, name)
		for _, r := range cd.runs {
			fmt.Printf(" %-32s", cell(r))
		}
	}
	line("lease", func(r *pauseRun) string {
		if r.fenceA > 0 {
			return fmt.Sprintf("%ds, renewal Holder", ctrlLeaseSeconds)
		}
		return "15s (renew deadline 10s)"
	})
	line("fences", func(r *pauseRun) string {
		if r.fenceA > 0 {
			return fmt.Sprintf("%d, then %d", r.fenceA, r.fenceB)
		}
		return "none"
	})
	line("paused for", func(r *pauseRun) string { return seconds(r.result.Paused) })
	line("the other wrote every Widget after", func(r *pauseRun) string { return seconds(r.handoff) })
	line("its manager stopped, after the resume", func(r *pauseRun) string { return seconds(r.result.Noticed) })
	line("late writes accepted / rejected", func(r *pauseRun) string { return split(r.result.Late) })
	line("its controller's own accepted / rejected", func(r *pauseRun) string { return split(r.result.Own) })
	line("  … refused by its client before sending", func(r *pauseRun) string { return fmt.Sprint(r.result.Own[writelog.Refused]) })
	line("Widgets given a slot from its stale view", func(r *pauseRun) string { return fmt.Sprintf("%d of %d", r.result.Overwritten, widgetCount) })
	fmt.Println()
	if len(cd.runs) == 1 {
		fmt.Println("\n    client-go's leader election was not shown (CLIENTGO=0): make demo-controller shows it by default.")
	}
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func split(t writelog.Tally) string {
	return fmt.Sprintf("%d / %d", t[writelog.Accepted], t[writelog.Rejected])
}

func (cd *ctrlDemo) lookAround() {
	cd.step("The cluster stays up: look around")
	fmt.Printf(`
    The replica processes are stopped and the Deployments scaled to zero (their pods, with no process
    behind them, would pass the grant back and forth). What they wrote stays.

    export KUBECONFIG=%s
    kubectl=%s    # or any kubectl
`, cd.cl.Kubeconfig, cd.kubectl)
	cols := `-o custom-columns='NAME:.metadata.name,SLOT:.spec.slot,HOLDER:.status.holder,FENCE:.status.fence,PROTECTED-BY:.metadata.labels.fencedlease\.io/protected-by'`
	for _, r := range cd.runs {
		fmt.Printf("\n    # %s\n", r.election)
		if r.fenceA > 0 {
			fmt.Printf("    $kubectl -n %s get fl,lease       # the FencedLease: holder, fence; the Lease it grants\n", r.ns)
			fmt.Printf("    $kubectl -n %s get events --field-selector reason=StaleWriteRejected\n", r.ns)
		} else {
			fmt.Printf("    $kubectl -n %s get lease          # client-go's election record\n", r.ns)
		}
		fmt.Printf("    $kubectl -n %s get widgets %s\n", r.ns, cols)
		fmt.Printf("    replica logs: %s (paused), %s\n", rel(r.a.LogFile()), rel(r.b.LogFile()))
	}
	fmt.Printf(`
    # the fencing webhook's rules, widgets among them
    $kubectl get validatingwebhookconfiguration -l app.kubernetes.io/instance=%s -o jsonpath='{.items[*].webhooks[*].rules}'

    The operator's log: %s
    Again: make demo-controller (CLIENTGO=0 skips client-go's election). Stop everything: make cluster-down
`, release, rel(cd.op.LogFile()))
}

// dump prints what there is to see after a failure.
func (cd *ctrlDemo) dump() {
	for _, ns := range cd.namespaces {
		for _, args := range [][]string{
			{"-n", ns, "get", "fl,lease,pods,widgets", "-o", "wide"},
			{"-n", ns, "get", "events", "--sort-by=.lastTimestamp"},
		} {
			out, _ := exec.Command(cd.kubectl, append([]string{"--kubeconfig", cd.cl.Kubeconfig}, args...)...).CombinedOutput()
			fmt.Fprintf(os.Stderr, "\n$ kubectl %s\n%s", strings.Join(args, " "), out)
		}
	}
	for _, r := range cd.replicas {
		fmt.Fprintf(os.Stderr, "\nreplica %s (%s), last lines:\n%s\n", r.Name, r.LogFile(), cd.cl.Tail(r.Name, 30))
	}
	if cd.op != nil {
		fmt.Fprintf(os.Stderr, "\noperator log (%s), last lines:\n%s\n", cd.op.LogFile(), cd.cl.Tail("operator-demo", 40))
	}
}
