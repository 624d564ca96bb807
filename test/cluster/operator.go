package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// NoContainers says, once, what the local cluster does not do.
const NoContainers = "No kubelet runs containers here: kwok plays the nodes and pods, and the operator runs as a local process (bin/manager) under the chart's ServiceAccount, its webhooks called by URL."

// Install is the chart installed into the cluster.
type Install struct {
	Release, Namespace string
	// Deployment is the operator's Deployment as the chart made it: its
	// pod template has the flags and the ServiceAccount the local
	// operators run with.
	Deployment *appsv1.Deployment
}

// InstallChart installs (or upgrades) the chart with helm, then scales the
// operator's Deployment to zero: its pods would only be simulated. The
// operator runs as local processes instead (StartOperator). helmArgs go to
// helm as they are (values: --set, --set-json, --values).
func (c *Cluster) InstallChart(ctx context.Context, helm, chart, release, namespace string, helmArgs ...string) (*Install, error) {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	// An earlier install's webhook configurations call the local operator
	// by URL (PointWebhooks); helm's patch back to the chart's Service would
	// leave both, which the API server refuses. They go, helm makes them
	// again, and PointWebhooks points them again.
	if err := deleteReleaseWebhooks(ctx, cs, release, func(*admissionregistrationv1.WebhookClientConfig) bool { return true }); err != nil {
		return nil, err
	}
	if err := c.runHelm(ctx, helm, release, chart, namespace, helmArgs...); err != nil {
		return nil, err
	}
	dep, err := operatorDeployment(ctx, cs, release, namespace)
	if err != nil {
		return nil, err
	}
	if _, err := cs.AppsV1().Deployments(namespace).Patch(ctx, dep.Name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("scale Deployment %s/%s to zero: %w", namespace, dep.Name, err)
	}
	return &Install{Release: release, Namespace: namespace, Deployment: dep}, nil
}

// releaseObjects selects the objects of a helm release.
func releaseObjects(release string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
}

// runHelm installs or upgrades release from chart in namespace, with args
// after the command's, helm's cache, configuration and data kept in the
// cluster's directory.
func (c *Cluster) runHelm(ctx context.Context, helm, release, chart, namespace string, args ...string) error {
	args = append([]string{"upgrade", "--install", release, chart, "--namespace", namespace, "--create-namespace", "--kubeconfig", c.Kubeconfig}, args...)
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.Dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.Dir, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(c.Dir, "helm", "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// operatorDeployment is the release's one Deployment, the operator's.
func operatorDeployment(ctx context.Context, cs kubernetes.Interface, release, namespace string) (*appsv1.Deployment, error) {
	deps, err := cs.AppsV1().Deployments(namespace).List(ctx, releaseObjects(release))
	if err != nil {
		return nil, fmt.Errorf("list the Deployments of release %s: %w", release, err)
	}
	if len(deps.Items) != 1 {
		return nil, fmt.Errorf("release %s/%s has %d Deployments, want the operator's alone", namespace, release, len(deps.Items))
	}
	return &deps.Items[0], nil
}

// deleteReleaseWebhooks deletes the release's webhook configurations that
// del picks by the clientConfig of their first webhook (nil when they have
// none).
func deleteReleaseWebhooks(ctx context.Context, cs kubernetes.Interface, release string, del func(*admissionregistrationv1.WebhookClientConfig) bool) error {
	api := cs.AdmissionregistrationV1()
	vs, err := api.ValidatingWebhookConfigurations().List(ctx, releaseObjects(release))
	if err != nil {
		return fmt.Errorf("list the ValidatingWebhookConfigurations of release %s: %w", release, err)
	}
	ms, err := api.MutatingWebhookConfigurations().List(ctx, releaseObjects(release))
	if err != nil {
		return fmt.Errorf("list the MutatingWebhookConfigurations of release %s: %w", release, err)
	}
	type picked struct {
		kind, name string
		delete     func(context.Context, string, metav1.DeleteOptions) error
	}
	var doomed []picked
	for _, w := range vs.Items {
		if len(w.Webhooks) == 0 && del(nil) || len(w.Webhooks) > 0 && del(&w.Webhooks[0].ClientConfig) {
			doomed = append(doomed, picked{"ValidatingWebhookConfiguration", w.Name, api.ValidatingWebhookConfigurations().Delete})
		}
	}
	for _, w := range ms.Items {
		if len(w.Webhooks) == 0 && del(nil) || len(w.Webhooks) > 0 && del(&w.Webhooks[0].ClientConfig) {
			doomed = append(doomed, picked{"MutatingWebhookConfiguration", w.Name, api.MutatingWebhookConfigurations().Delete})
		}
	}
	for _, d := range doomed {
		if err := d.delete(ctx, d.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s of release %s: %w", d.kind, d.name, release, err)
		}
	}
	return nil
}

// PointWebhooks rewrites the clientConfig of the chart's webhook
// configurations to call addr (host:port) by URL, the path kept; the CA
// bundle is left for the operator to inject. test/install does the same on
// envtest.
func (c *Cluster) PointWebhooks(ctx context.Context, in *Install, addr string) error {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return err
	}
	sel := releaseObjects(in.Release)
	point := func(cc *admissionregistrationv1.WebhookClientConfig) {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		} else if cc.URL != nil {
			if i := strings.Index(strings.TrimPrefix(*cc.URL, "https://"), "/"); i >= 0 {
				path = strings.TrimPrefix(*cc.URL, "https://")[i:]
			}
		}
		*cc = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + path)}
	}
	vs, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, sel)
	if err != nil {
		return err
	}
	for i := range vs.Items {
		w := &vs.Items[i]
		for j := range w.Webhooks {
			point(&w.Webhooks[j].ClientConfig)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, w, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("point ValidatingWebhookConfiguration %s at %s: %w", w.Name, addr, err)
		}
	}
	ms, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, sel)
	if err != nil {
		return err
	}
	for i := range ms.Items {
		w := &ms.Items[i]
		for j := range w.Webhooks {
			point(&w.Webhooks[j].ClientConfig)
		}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, w, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("point MutatingWebhookConfiguration %s at %s: %w", w.Name, addr, err)
		}
	}
	if len(vs.Items)+len(ms.Items) == 0 {
		return fmt.Errorf("release %s has no webhook configurations", in.Release)
	}
	return nil
}

// Operator is a local operator process.
type Operator struct {
	// Name tells the replicas apart: the process is operator-<name>.
	Name string
	// WebhookAddr is where its webhook server listens (127.0.0.1:port).
	WebhookAddr string
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
	// Pod is the pod whose bound token the process authenticates with.
	Pod *corev1.Pod
	c   *Cluster
}

const operatorPrefix = "operator-"

// StartOperator runs manager (bin/manager) with the flags of the chart's
// Deployment, authenticated by a service-account token that the
// TokenRequest API binds to a pod of that ServiceAccount, as the kubelet
// would give it. Only what a pod has and a local process does not changes:
// the listen addresses, a certificate directory, the extra name localhost
// on the certificate, and the kubeconfig. The pod (operator-<name> in the
// release namespace) stands for the process: kwok runs it, it tolerates
// every taint, and it matches no selector of the chart.
func (c *Cluster) StartOperator(ctx context.Context, in *Install, manager, name string, webhookPort int) (*Operator, error) {
	cs, err := kubernetes.NewForConfig(c.RestConfig)
	if err != nil {
		return nil, err
	}
	pod, err := c.operatorPod(ctx, cs, in, name)
	if err != nil {
		return nil, err
	}
	tmpl := in.Deployment.Spec.Template.Spec
	dir := filepath.Join(c.Dir, "operators", name)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.podKubeconfig(ctx, cs, pod, kubeconfig, 7*24*3600); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	o := &Operator{Name: name, WebhookAddr: fmt.Sprintf("127.0.0.1:%d", webhookPort),
		ProbeAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Pod: pod, c: c}
	args := append(append([]string(nil), tmpl.Containers[0].Args...),
		"--webhook-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", webhookPort),
		"--webhook-cert-dir="+filepath.Join(dir, "certs"),
		"--webhook-cert-extra-dns-name=localhost",
		"--health-probe-bind-address="+o.ProbeAddr,
		"--metrics-bind-address=0",
	)
	if err := c.start(process{name: operatorPrefix + name, bin: manager, args: args,
		env: []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + in.Namespace}}); err != nil {
		return nil, err
	}
	return o, nil
}

func (c *Cluster) operatorPod(ctx context.Context, cs kubernetes.Interface, in *Install, name string) (*corev1.Pod, error) {
	podName := operatorPrefix + name
	if pod, err := cs.CoreV1().Pods(in.Namespace).Get(ctx, podName, metav1.GetOptions{}); err == nil && pod.DeletionTimestamp == nil {
		return pod, nil
	}
	tmpl := in.Deployment.Spec.Template
	labels := map[string]string{"app.kubernetes.io/component": "local-operator", "app.kubernetes.io/part-of": "fencedlease"}
	for k, v := range tmpl.Labels {
		if _, sel := in.Deployment.Spec.Selector.MatchLabels[k]; !sel {
			labels[k] = v
		}
	}
	pod := &corev1.Pod{
		// Not a fencedlease.io/ annotation: those are the operator's own
		// (the chart's admission policy keeps them so).
		ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: podName, Labels: labels,
			Annotations: map[string]string{"local-cluster/process": "the operator runs as a local process, authenticated with this pod's token"}},
		Spec: tmpl.Spec,
	}
	pod.Spec.NodeName = c.Nodes[0]
	pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	pod.Spec.TopologySpreadConstraints = nil
	created, err := cs.CoreV1().Pods(in.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("pod %s/%s is being deleted; try again", in.Namespace, podName)
	}
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", in.Namespace, podName, err)
	}
	return created, nil
}

// WaitReady waits until the operator's readiness endpoint answers 200: its
// certificate is provisioned and the webhook configurations trust it.
func (o *Operator) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := o.Ready()
		if err == nil {
			return nil
		}
		if _, ok := o.c.pid(operatorPrefix + o.Name); !ok {
			return fmt.Errorf("operator %s exited:\n%s", o.Name, o.tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operator %s is not ready after %s: %w\n%s", o.Name, timeout, err, o.tail(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail is the end of the operator's log without the failed readiness
// probes, which would fill it while it is not ready.
func (o *Operator) tail(lines int) string {
	var keep []string
	for _, l := range strings.Split(o.Log(), "\n") {
		if !strings.Contains(l, "healthz check failed") {
			keep = append(keep, l)
		}
	}
	if len(keep) > lines {
		keep = keep[len(keep)-lines:]
	}
	return strings.Join(keep, "\n")
}

// Ready asks the readiness endpoint, as the kubelet does.
func (o *Operator) Ready() error {
	resp, err := http.Get("http://" + o.ProbeAddr + "/readyz?verbose") //nolint:noctx // a local probe
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %d: %s", resp.StatusCode, body)
	}
	return nil
}

// Stop ends the process with SIGTERM (SIGKILL after 10s).
func (o *Operator) Stop() error { return o.c.stop(operatorPrefix+o.Name, 10*time.Second) }

// Kill ends the process with SIGKILL: a crash.
func (o *Operator) Kill() error { return o.c.kill(operatorPrefix + o.Name) }

// Running says whether the process runs.
func (o *Operator) Running() bool {
	_, ok := o.c.pid(operatorPrefix + o.Name)
	return ok
}

// Log is the process's output so far.
func (o *Operator) Log() string {
	b, _ := os.ReadFile(o.c.logFile(operatorPrefix + o.Name))
	return string(b)
}

// LogFile is the path of the process's log.
func (o *Operator) LogFile() string { return o.c.logFile(operatorPrefix + o.Name) }

// StopOperator stops the named operator process if it runs.
func (c *Cluster) StopOperator(name string) error { return c.stop(operatorPrefix+name, 10*time.Second) }
