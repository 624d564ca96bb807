package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

type demo struct {
	ctx     context.Context
	cl      *cluster.Cluster
	c       client.Client
	kubectl string
	start   time.Time
	ns      string
	op      *cluster.Operator
	// install is the chart installed in the cluster (the workload scene),
	// realNodes the cluster's real nodes.
	install   *cluster.Install
	realNodes []string

	handoffs        []handoff
	accepted        int
	rejected        int
	violations      []string
	publishedFences []int64
	checker         *testenv.HolderChecker
}

// handoff is one change of holder the demo measured.
type handoff struct {
	cause    string
	from, to string
	fence    int64
	took     time.Duration
}

func (d *demo) stamp() string {
	return fmt.Sprintf("%s +%5.1fs", time.Now().Format("15:04:05.000"), time.Since(d.start).Seconds())
}

func (d *demo) step(title string) {
	fmt.Printf("\n[%s] ==> %s\n", d.stamp(), title)
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%s]     %s\n", d.stamp(), fmt.Sprintf(format, args...))
}

// explain prints a line for the newcomer, without a timestamp.
func explain(format string, args ...any) {
	fmt.Printf("%23s %s\n", "", fmt.Sprintf(format, args...))
}

// startOperator (re)starts the local operator process named demo, with the
// chart's flags and ServiceAccount, points the chart's webhook
// configurations at it, and waits until it leads.
func (d *demo) startOperator(in *cluster.Install, manager string) error {
	if _, err := os.Stat(manager); err != nil {
		return fmt.Errorf("%s is missing: run 'make build' (make demo does)", manager)
	}
	before, err := d.operatorLeader(in.Namespace)
	if err != nil {
		return err
	}
	if err := d.cl.StopOperator("demo"); err != nil {
		return err
	}
	port, err := harness.FreePort()
	if err != nil {
		return err
	}
	if err := d.cl.PointWebhooks(d.ctx, in, fmt.Sprintf("localhost:%d", port)); err != nil {
		return err
	}
	op, err := d.cl.StartOperator(d.ctx, in, manager, "demo", port)
	if err != nil {
		return err
	}
	if err := op.WaitReady(d.ctx, 2*time.Minute); err != nil {
		return err
	}
	d.op = op
	d.say("The operator runs: %s, as ServiceAccount %s/%s (a token bound to pod %s/%s),",
		rel(manager), in.Namespace, in.Deployment.Spec.Template.Spec.ServiceAccountName, op.Pod.Namespace, op.Pod.Name)
	d.say("with the chart's flags; the webhooks are called at https://localhost:%d. Its log: %s", port, rel(op.LogFile()))
	return d.waitOperatorLeads(in.Namespace, before)
}

// operatorLock is the operator's own leader-election Lease.
const operatorLock = "fencedlease-operator"

// operatorLeader is the holder of the operator's leader-election Lease,
// "" if there is none.
func (d *demo) operatorLeader(ns string) (string, error) {
	l := &coordinationv1.Lease{}
	err := d.c.Get(d.ctx, client.ObjectKey{Namespace: ns, Name: operatorLock}, l)
	if apierrors.IsNotFound(err) || err == nil && l.Spec.HolderIdentity == nil {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// waitOperatorLeads waits until the operator process leads: its leader
// election Lease names a holder other than before, the process it replaced.
// That process left the Lease held, so its successor waits for it to
// expire.
func (d *demo) waitOperatorLeads(ns, before string) error {
	t0 := time.Now()
	deadline := t0.Add(time.Minute)
	for {
		h, err := d.operatorLeader(ns)
		if err != nil {
			return err
		}
		if h != "" && h != before {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator did not take its leader-election Lease %s/%s in a minute (holder %q)", ns, operatorLock, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(t0); took > 2*time.Second {
		d.say("It leads (Lease %s/%s) %.1fs later: the operator process it replaced had left that Lease held.", ns, operatorLock, took.Seconds())
	}
	return nil
}

func (d *demo) summary() {
	d.step("Summary")
	fmt.Printf("\n    %-20s %-27s %-27s %6s %7s\n", "handoff", "from", "to", "fence", "took")
	for _, h := range d.handoffs {
		took := fmt.Sprintf("%.1fs", h.took.Seconds())
		fmt.Printf("    %-20s %-27s %-27s %6d %7s\n", h.cause, h.from, h.to, h.fence, took)
	}
	fmt.Printf("\n    protected writes accepted: %d, rejected: %d\n", d.accepted, d.rejected)
	fmt.Printf("    fences published, in order: %v (each greater than the one before)\n", d.publishedFences)
	if len(d.violations) == 0 {
		fmt.Printf("    two holders at once: never (every pod and FencedLease change was watched)\n")
	} else {
		fmt.Printf("    VIOLATIONS: %v\n", d.violations)
	}
}

func (d *demo) lookAround() {
	d.step("The cluster stays up: look around")
	fmt.Printf(`
    export KUBECONFIG=%s
    kubectl=%s    # or any kubectl

    $kubectl -n %s get fl              # the FencedLease: holder, fence, candidates
    $kubectl -n %s get lease           # the Lease it grants
    $kubectl -n %s get pods -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,ROLE:.metadata.annotations.fencedlease\.io/role,FENCE:.metadata.annotations.fencedlease\.io/fence'
    $kubectl -n %s describe pod <pod>  # annotations, readiness gate, token volume
    $kubectl -n %s get events --sort-by=.lastTimestamp
    $kubectl -n %s delete pod <holder> # and watch another pod take over
    $kubectl -n %s get pods -o wide   # the operator's two pods
    $kubectl get nodes                          # real-node-* run containers, kwok-node-* are simulated

    Containers' logs (the API server cannot reach the kubelets for kubectl logs):
        %s/nodes/<node>/pod-logs/<namespace>_<pod>_<uid>/<container>/
    Stop everything:    make cluster-down
`, d.cl.Kubeconfig, d.kubectl, d.ns, d.ns, d.ns, d.ns, d.ns, d.ns, namespace, d.cl.Dir)
}

// dump prints what there is to see after a failure.
func (d *demo) dump() {
	if d.ns == "" {
		return
	}
	for _, args := range [][]string{
		{"-n", d.ns, "get", "fl,lease,pods", "-o", "wide"},
		{"-n", d.ns, "get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, _ := exec.Command(d.kubectl, append([]string{"--kubeconfig", d.cl.Kubeconfig}, args...)...).CombinedOutput()
		fmt.Fprintf(os.Stderr, "\n$ kubectl %s\n%s", strings.Join(args, " "), out)
	}
	if d.op != nil {
		fmt.Fprintf(os.Stderr, "\noperator log (%s), last lines:\n%s\n", d.op.LogFile(), d.cl.Tail("operator-demo", 40))
	}
	if d.install != nil {
		fmt.Fprintf(os.Stderr, "\noperator pods' logs, last lines:\n%s\n", d.operatorLog(30))
	}
}
