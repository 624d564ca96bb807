package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	ctx        context.Context
	env        *testenv.Env
	c          client.Client
	kubeconfig string
	kubectl    string
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := testenv.RepoRoot()
	step("Starting kube-apiserver and etcd (built from source into bin/k8s/)")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	d := &demo{ctx: ctx, env: env, c: env.Client, kubectl: filepath.Join(env.BinaryAssetsDirectory, "kubectl")}
	if err := d.writeKubeconfig(filepath.Join(root, "bin", "demo")); err != nil {
		return err
	}

	step("Running the operator (bin/manager) against it")
	logPath := filepath.Join(root, "bin", "demo", "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	mgr := exec.CommandContext(ctx, filepath.Join(root, "bin", "manager"), "--kubeconfig", d.kubeconfig,
		"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0", "--enable-webhooks=false")
	mgr.Stdout, mgr.Stderr = logFile, logFile
	if err := mgr.Start(); err != nil {
		return fmt.Errorf("start bin/manager (run 'make build' first): %w", err)
	}
	defer func() { _ = mgr.Process.Kill(); _ = mgr.Wait() }()
	fmt.Println("   operator log:", logPath)

	step("kubectl apply -f config/samples/")
	if err := d.show("apply", "-n", "default", "-f", filepath.Join(root, "config", "samples", "fencing_v1alpha1_fencedlease.yaml")); err != nil {
		return err
	}

	step("Three replicas of the singleton start (the demo plays their kubelet)")
	var pods []*corev1.Pod
	for i := range 3 {
		p, err := testenv.CreatePod(ctx, d.c, testenv.Pod{Namespace: "default", Name: fmt.Sprintf("report-exporter-%d", i),
			Labels: map[string]string{"app": "report-exporter"}})
		if err != nil {
			return err
		}
		if err := testenv.SetReady(ctx, d.c, p, time.Now().Add(time.Duration(i)*time.Second)); err != nil {
			return err
		}
		pods = append(pods, p)
	}
	holder, fence, err := d.waitHolder(0)
	if err != nil {
		return err
	}
	d.state()

	step(fmt.Sprintf("The holder %s dies; with takeover Safe nobody is granted until its grant expires (15s)", holder))
	for _, p := range pods {
		if p.Name == holder {
			if err := testenv.SetFailed(ctx, d.c, p); err != nil {
				return err
			}
		}
	}
	time.Sleep(2 * time.Second)
	d.state()
	next, nextFence, err := d.waitHolder(fence)
	if err != nil {
		return err
	}
	step(fmt.Sprintf("%s took over with fence %d > %d: a write still carrying %d is now stale", next, nextFence, fence, fence))
	d.state()
	step("Events")
	_ = d.show("get", "events.v1.events.k8s.io", "-n", "default", "--sort-by=.metadata.creationTimestamp", "-o",
		"custom-columns=OBJECT:.regarding.name,REASON:.reason,NOTE:.note")
	return nil
}

func step(msg string) { fmt.Printf("\n==> %s\n", msg) }

func (d *demo) writeKubeconfig(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	user, err := d.env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	d.kubeconfig = filepath.Join(dir, "kubeconfig")
	fmt.Printf("   kubeconfig: %s (try: %s --kubeconfig %s get fl)\n", d.kubeconfig, d.kubectl, d.kubeconfig)
	return os.WriteFile(d.kubeconfig, data, 0o600)
}

func (d *demo) show(args ...string) error {
	fmt.Println("   $ kubectl " + strings.Join(args, " "))
	cmd := exec.CommandContext(d.ctx, d.kubectl, append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func (d *demo) state() {
	_ = d.show("get", "fencedleases", "-n", "default")
	_ = d.show("get", "pods", "-n", "default", "-o",
		`custom-columns=POD:.metadata.name,PHASE:.status.phase,ROLE:.metadata.annotations.fencedlease\.io/role,FENCE:.metadata.annotations.fencedlease\.io/fence`)
}

// waitHolder waits for a holder with a fence greater than after.
func (d *demo) waitHolder(after int64) (string, int64, error) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		fl := &fencingv1alpha1.FencedLease{}
		if err := d.c.Get(d.ctx, client.ObjectKey{Namespace: "default", Name: "report-exporter"}, fl); err == nil &&
			fl.Status.Holder != nil && fl.Status.Fence > after {
			pod := &corev1.Pod{}
			if err := d.c.Get(d.ctx, client.ObjectKey{Namespace: "default", Name: fl.Status.Holder.PodName}, pod); err == nil &&
				pod.Annotations[fencingv1alpha1.AnnotationRole] == fencingv1alpha1.RoleHolder {
				return fl.Status.Holder.PodName, fl.Status.Fence, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "", 0, fmt.Errorf("no holder with a fence above %d within 60s; see bin/demo/manager.log", after)
}
