package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/controllers/writelog"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

const controllerIntro = `fencedlease demo: a fenced controller
=====================================
A controller runs in several replicas and leader election picks the one that acts. client-go's
leader election gives the leader no fence: a replica paused past its lease (a GC pause, a frozen VM)
wakes up still believing it leads and writes from its stale view, while the new leader writes too.
pkg/fencedcontroller makes a controller-runtime manager a candidate of a FencedLease instead: its
controllers run only while its pod holds the grant, every write carries the grant's fence, and the
API server (through the operator's webhook) rejects the writes of a replica whose grant passed on.`

const (
	// widgetLease is the FencedLease of the example's manifest.
	widgetLease = "widget-controller"
	// ctrlLeaseSeconds replaces the manifest's 15 s, so that the demo
	// does not wait long for the paused holder's grant to end.
	ctrlLeaseSeconds = 4
	// lateWrites is how long the resumed replica writes on.
	lateWrites = 5 * time.Second
	// widgetCount Widgets are created in each namespace.
	widgetCount = 3
	// ctrlDemoLabelValue of the label demoLabel marks the namespaces of
	// the controller scene, apart from the workload scene's.
	ctrlDemoLabelValue = "controller"
)

// protectWidgets is the chart value that lists Widgets and their status
// among the fencing webhook's protected resources, beside the defaults.
const protectWidgets = `webhooks.protectedResources=[{"apiGroup":"","resources":["configmaps","secrets"]},` +
	`{"apiGroup":"examples.fencedlease.io","resources":["widgets","widgets/status"]}]`

// ctrlDemo is the controller scene: the example fenced controller in two
// replica processes, the holder paused past its deadline and resumed; then
// the same on client-go's leader election.
type ctrlDemo struct {
	*demo
	// w is an administrator's client that knows Widgets.
	w        client.Client
	example  string
	config   string
	clientGo bool
	replicas []*cluster.PodProcess
	// namespaces are this run's, runs the pauses shown.
	namespaces []string
	runs       []*pauseRun
}

// pauseRun is one pause of the replica that acts, and what it wrote once
// resumed.
type pauseRun struct {
	// election names how the replicas elect the one that acts, waits
	// what the others wait for.
	election, waits string
	ns              string
	// a acts first and is paused at pausedAt, resumed at resumedAt; b
	// takes over.
	a, b                *cluster.PodProcess
	pausedAt, resumedAt time.Time
	// fenceA and fenceB are the fences of a's and b's grants (FencedLease
	// only).
	fenceA, fenceB int64
	// handoff is how long after a was paused b had written every Widget.
	handoff time.Duration
	result  writelog.SplitBrain
	// stopped is a's manager's last word.
	stopped   string
	rejection string
}

func (d *demo) controllerScene(o options) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fencingv1alpha1.AddToScheme, examplesv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	w, err := client.New(d.cl.RestConfig, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cd := &ctrlDemo{demo: d, w: w, example: o.example, config: o.exampleConfig, clientGo: o.clientGo}
	if _, err := exec.LookPath(cd.example); err != nil {
		return fmt.Errorf("%s is missing: run 'make build-example' (make demo-controller does)", cd.example)
	}
	if err := cd.cl.StopPodProcesses(widgetLease + "-"); err != nil {
		return err
	}
	err = cd.scene(o)
	if err != nil {
		cd.dump()
	}
	// The replicas go whatever happened; make cluster-down would stop
	// them too.
	errs := []error{err}
	for _, r := range cd.replicas {
		errs = append(errs, r.Stop())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := cd.scaleDown(); err != nil {
		return err
	}
	cd.summary()
	cd.lookAround()
	return nil
}

func (cd *ctrlDemo) scene(o options) error {
	if err := cd.removeEarlier(); err != nil {
		return err
	}
	cd.step("Installing the Widget CRD, then the operator from the Helm chart with Widgets protected")
	if err := cd.kubectlApply(filepath.Join(cd.config, "crd"), filepath.Join(cd.config, "rbac", "role.yaml")); err != nil {
		return err
	}
	cd.say("kubectl apply --server-side -f %s/crd -f %s/rbac/role.yaml: the Widget CRD, the ClusterRole widget-controller.",
		rel(cd.config), rel(cd.config))
	if err := cd.installOperator(o, "--set-json", protectWidgets); err != nil {
		return err
	}
	explain("The fencing webhook now decides every write to widgets and widgets/status labelled fencedlease.io/protected-by.")

	if err := cd.fencedRun(); err != nil {
		return err
	}
	if !cd.clientGo {
		cd.step("client-go's leader election: skipped (--clientgo=false; make demo-controller CLIENTGO=0)")
		return nil
	}
	return cd.clientGoRun()
}

// kubectlApply applies files with the cluster's kubectl, as a user would,
// and waits until the Widget CRD among them is established.
func (cd *ctrlDemo) kubectlApply(files ...string) error {
	args := []string{"--kubeconfig", cd.cl.Kubeconfig, "apply", "--server-side"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	out, err := exec.CommandContext(cd.ctx, cd.kubectl, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	args = []string{"--kubeconfig", cd.cl.Kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd/widgets.examples.fencedlease.io"}
	if out, err := exec.CommandContext(cd.ctx, cd.kubectl, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// fencedRun: the replicas as candidates of the FencedLease; the holder
// paused past its deadline, the other granted, the old one resumed.
func (cd *ctrlDemo) fencedRun() error {
	r := &pauseRun{election: "FencedLease", waits: "the grant"}
	cd.step("The example controller's manifest, as a user applies it")
	ns, err := cd.namespace("demo-ctrl-")
	if err != nil {
		return err
	}
	r.ns = ns
	if err := cd.applyManifest(ns, true); err != nil {
		return err
	}
	cd.say("Namespace %s: %s/deploy/widget-controller.yaml with its FencedLease %s (renewal Holder,", ns, rel(cd.config), widgetLease)
	explain("lease %ds here instead of 15 s, renewed by the holder pod every second), ServiceAccount, RoleBindings,", ctrlLeaseSeconds)
	explain("and a 2-replica Deployment whose pods kwok runs.")
	replicas, err := cd.startReplicas(ns)
	if err != nil {
		return err
	}
	if err := cd.createWidgets(ns); err != nil {
		return err
	}

	t0 := time.Now()
	holder, fa, err := cd.waitFencedHolder(ns, nil, 0, time.Minute)
	if err != nil {
		return err
	}
	r.a, r.fenceA = replicas[holder], fa
	r.b = other(replicas, holder)
	cd.step(fmt.Sprintf("%s holds FencedLease %s with fence %d, and its controller wrote every Widget (%.1fs)",
		holder, widgetLease, fa, time.Since(t0).Seconds()))
	cd.showWidgets(ns)
	explain("Its first write of each Widget added the label fencedlease.io/protected-by=%s, with its fence in the", widgetLease)
	explain("annotation fencedlease.io/fence; status writes carry it in their field manager ('widget-controller;fencedlease.io/fence=%d').", fa)
	if err := cd.sayFirstWrites(r); err != nil {
		return err
	}

	cd.step(fmt.Sprintf("%s is paused with SIGSTOP: it cannot renew, and does not know", r.a.Name))
	explain("As a frozen VM or a long GC pause. Its grant ends %ds after its last renewal (minus a margin) by its", ctrlLeaseSeconds)
	explain("own clock; the operator grants the other pod once it sees the Lease expire.")
	r.pausedAt = time.Now()
	if err := r.a.Pause(); err != nil {
		return err
	}
	if _, r.fenceB, err = cd.waitFencedHolder(ns, r.b, fa, time.Minute); err != nil {
		return err
	}
	r.handoff = time.Since(r.pausedAt)
	cd.say("%s was granted fence %d > %d and its controller wrote every Widget, %.1fs after the pause.", r.b.Name, r.fenceB, fa, r.handoff.Seconds())
	cd.showWidgets(ns)
	explain("The annotation keeps fence %d: %s had no reason to write a spec again. Its status writes carry", fa, r.b.Name)
	explain("fence %d in their field manager.", r.fenceB)
	time.Sleep(time.Second) // b writes on

	if err := cd.resume(r); err != nil {
		return err
	}
	cd.runs = append(cd.runs, r)
	return cd.judgeFenced(r)
}

// sayFirstWrites counts the writes of the replica that acts first, and
// checks that the other has made none.
func (cd *ctrlDemo) sayFirstWrites(r *pauseRun) error {
	ta, err := writesSoFar(r.a)
	if err != nil {
		return err
	}
	cd.say("%s's writes so far: %s.", r.a.Name, ta)
	tb, err := writesSoFar(r.b)
	if err != nil {
		return err
	}
	if n := sum(tb); n > 0 {
		return fmt.Errorf("%s's controller wrote before its pod held the grant: %s", r.b.Name, tb)
	}
	cd.say("%s has written nothing: its controller waits for %s.", r.b.Name, r.waits)
	return nil
}

// resume continues a and waits for it to exit after its late writes.
func (cd *ctrlDemo) resume(r *pauseRun) error {
	cd.step(fmt.Sprintf("%s is resumed (SIGCONT) after %.1fs, with --late-writes=%s", r.a.Name, time.Since(r.pausedAt).Seconds(), lateWrites))
	r.resumedAt = time.Now()
	if err := r.a.Resume(); err != nil {
		return err
	}
	if r.fenceA > 0 {
		explain("By its own clock its grant has ended: its manager stops the controller at once. Then, as a replica")
	} else {
		explain("Its controller writes on until its elector sees the renew deadline passed; then, as a replica")
	}
	explain("paused between its check and its send would, it keeps writing its Widgets for %s, spec and status,", lateWrites)
	explain("by update and by merge patch, as if it still acted.")
	deadline := time.Now().Add(lateWrites + 45*time.Second)
	for r.a.Running() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not exit %s after it was resumed", r.a.Name, time.Since(r.resumedAt).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
	exited := time.Since(r.resumedAt)
	log, err := readReplicaLog(r.a.LogFile(), r.resumedAt)
	if err != nil {
		return err
	}
	r.result = writelog.Judge(log.writes, r.pausedAt, r.resumedAt)
	r.result.Noticed = log.noticed
	r.stopped = log.stopped
	if r.result.Overwritten, err = cd.overwritten(r.ns); err != nil {
		return err
	}
	for _, w := range log.writes {
		if w.Late && w.Result == writelog.Rejected && r.rejection == "" {
			r.rejection = w.Error
		}
	}
	cd.say("Its manager stopped %.1fs after the resume, saying: %s", log.noticed.Seconds(), r.stopped)
	cd.say("It exited %.1fs after the resume, its late writes done.", exited.Seconds())
	return nil
}

// judgeFenced narrates what the fenced replica's writes became, and fails
// the demo if any of them was accepted.
func (cd *ctrlDemo) judgeFenced(r *pauseRun) error {
	res := r.result
	title := fmt.Sprintf("Not one of %s's writes after the resume was accepted", r.a.Name)
	if n := res.Late[writelog.Accepted] + res.Own[writelog.Accepted]; n > 0 {
		title = fmt.Sprintf("%d of %s's writes after the resume were accepted", n, r.a.Name)
	}
	cd.step(title)
	cd.say("late writes, with its old fence %d: %s", r.fenceA, res.Late)
	cd.say("its controller's own, before it stopped: %s", res.Own)
	if n := sum(res.InFlight); n > 0 {
		explain("(%d more were sent before the pause and answered after it: %s)", n, res.InFlight)
	}
	if res.Late[writelog.Accepted]+res.Own[writelog.Accepted] > 0 {
		return fmt.Errorf("writes of %s were accepted after it was resumed: late %s; own %s", r.a.Name, res.Late, res.Own)
	}
	if res.Late[writelog.Rejected] == 0 {
		return fmt.Errorf("no late write of %s reached the webhook: %s", r.a.Name, res.Late)
	}
	cd.say("One rejection, as the API server answered it:")
	explain("%s", r.rejection)
	for _, want := range []string{`FencedLease "` + widgetLease + `"`, strconv.FormatInt(r.fenceA, 10), strconv.FormatInt(r.fenceB, 10)} {
		if !strings.Contains(r.rejection, want) {
			return fmt.Errorf("the rejection does not name %s: %s", want, r.rejection)
		}
	}
	explain("The message names the FencedLease, the fence the write carried (%d) and the current one (%d).", r.fenceA, r.fenceB)
	cd.say("The Widgets are as %s left them: %d of them got a slot from %s's stale view.", r.b.Name, res.Overwritten, r.a.Name)
	cd.showWidgets(r.ns)
	if res.Overwritten > 0 {
		return fmt.Errorf("%d Widgets were overwritten by %s", res.Overwritten, r.a.Name)
	}
	return nil
}

func sum(t writelog.Tally) int {
	n := 0
	for _, v := range t {
		n += v
	}
	return n
}
