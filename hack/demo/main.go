package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	env, err := testenv.Start(testenv.WithWebhooks())
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	d := &demo{ctx: ctx, env: env, c: env.Client, kubectl: filepath.Join(env.BinaryAssetsDirectory, "kubectl")}
	dir := filepath.Join(root, "bin", "demo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if d.kubeconfig, err = d.writeKubeconfig(dir, "kubeconfig", "demo-admin"); err != nil {
		return err
	}
	fmt.Printf("   kubeconfig: %s (try: %s --kubeconfig %s get fl)\n", d.kubeconfig, d.kubectl, d.kubeconfig)
	operatorConfig, err := d.writeKubeconfig(dir, "operator.kubeconfig", operatorUser)
	if err != nil {
		return err
	}

	step("Running the operator (bin/manager) against it")
	logPath := filepath.Join(root, "bin", "demo", "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	wh := env.WebhookInstallOptions
	mgr := exec.CommandContext(ctx, filepath.Join(root, "bin", "manager"), "--kubeconfig", operatorConfig,
		"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--webhook-port", strconv.Itoa(wh.LocalServingPort), "--webhook-cert-dir", wh.LocalServingCertDir,
		"--operator-user", operatorUser, "--webhook-token-secret", "default/fencedlease-webhook-token")
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

	step("Three replicas of the singleton start (the demo plays their kubelet); their service account may write ConfigMaps")
	if err := grantConfigMaps(ctx, d.c); err != nil {
		return err
	}
	var pods []*corev1.Pod
	for i := range 3 {
		p, err := testenv.CreatePod(ctx, d.c, testenv.Pod{Namespace: "default", Name: fmt.Sprintf("report-exporter-%d", i),
			Labels: map[string]string{"app": "report-exporter"}, ServiceAccount: "default"})
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

	step(fmt.Sprintf("%s writes the protected ConfigMap export-state with its fence %d, as itself (bound service-account token)", holder, fence))
	byName := map[string]*corev1.Pod{}
	clients := map[string]client.Client{}
	for _, p := range pods {
		byName[p.Name] = p
		if clients[p.Name], err = testenv.PodClient(ctx, env.Config, p); err != nil {
			return err
		}
	}
	if err := writeState(ctx, clients[holder], fence, "written by "+holder); err != nil {
		return err
	}
	d.showState()

	step(fmt.Sprintf("%s stalls (a long GC pause: its containers stop being ready); takeover Safe waits until its grant expires (15s)", holder))
	if err := testenv.SetContainersNotReady(ctx, d.c, byName[holder]); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	d.state()
	next, nextFence, err := d.waitHolder(fence)
	if err != nil {
		return err
	}
	step(fmt.Sprintf("%s took over with fence %d > %d and writes", next, nextFence, fence))
	d.state()
	if err := writeState(ctx, clients[next], nextFence, "written by "+next); err != nil {
		return err
	}
	d.showState()

	step(fmt.Sprintf("%s wakes up and writes with its old fence %d: the API server rejects it", holder, fence))
	if err := mustBeRejected(writeState(ctx, clients[holder], fence, "stale data from "+holder)); err != nil {
		return err
	}
	for _, p := range pods {
		if p.Name != holder && p.Name != next {
			step(fmt.Sprintf("%s, a standby, copies the current fence %d: rejected, the token is bound to the holder pod", p.Name, nextFence))
			if err := mustBeRejected(writeState(ctx, clients[p.Name], nextFence, "forged by "+p.Name)); err != nil {
				return err
			}
		}
	}
	step("Even an administrator without the fence is turned away")
	_ = d.show("annotate", "configmap", "export-state", "-n", "default", "note=by-hand")
	d.showState()
	step("Events")
	_ = d.show("get", "events.v1.events.k8s.io", "-n", "default", "--sort-by=.metadata.creationTimestamp", "-o",
		"custom-columns=OBJECT:.regarding.name,REASON:.reason,NOTE:.note")
	return nil
}

// operatorUser is the user the operator binary authenticates as; the fencing
// webhook lets it write protected objects.
const operatorUser = "fencedlease-operator"

// writeState writes the protected ConfigMap export-state as a pod, carrying
// its fence.
func writeState(ctx context.Context, c client.Client, fence int64, data string) error {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "export-state"}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "export-state",
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "report-exporter"}}}
	} else if err != nil {
		return err
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[fencingv1alpha1.AnnotationFence] = strconv.FormatInt(fence, 10)
	cm.Data = map[string]string{"state": data}
	if cm.ResourceVersion == "" {
		return c.Create(ctx, cm)
	}
	return c.Update(ctx, cm)
}

// mustBeRejected prints the API server's answer to a write that fencing must
// reject, and fails the demo if it was accepted.
func mustBeRejected(err error) error {
	if err == nil {
		return errors.New("a stale or copied fence was accepted")
	}
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("a stale or copied fence was not rejected by fencing: %w", err)
	}
	fmt.Println("   ", err)
	return nil
}

// grantConfigMaps gives the pods' service account the RBAC a workload that
// writes ConfigMaps has.
func grantConfigMaps(ctx context.Context, c client.Client) error {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "report-exporter"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "report-exporter"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "report-exporter"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "default"}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func (d *demo) showState() {
	_ = d.show("get", "configmap", "export-state", "-n", "default", "-o",
		`custom-columns=NAME:.metadata.name,FENCE:.metadata.annotations.fencedlease\.io/fence,STATE:.data.state`)
}

func step(msg string) { fmt.Printf("\n==> %s\n", msg) }

func (d *demo) writeKubeconfig(dir, file, name string) (string, error) {
	user, err := d.env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, file)
	return path, os.WriteFile(path, data, 0o600)
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
