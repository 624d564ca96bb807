package install_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// operator is the manager binary of the image, running as a local process
// with the chart's ServiceAccount and the chart's Deployment flags.
type operator struct {
	cmd       *exec.Cmd
	log       *harness.SyncBuffer
	exited    chan struct{}
	probeAddr string
	// metricsAddr is the metrics endpoint (HTTPS, scrapes authorized by the
	// API server).
	metricsAddr string
	// webhookAddr is where the API server calls the webhooks.
	webhookAddr string
	// cfg authenticates as the operator's ServiceAccount.
	cfg *rest.Config
	// user is the operator's user name, as the API server sees it.
	user string
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startOperator installs nothing: it runs the manager of the image with the
// flags of the installed Deployment, authenticated by a token that the
// TokenRequest API binds to a pod of that Deployment, exactly as the kubelet
// would give it. Only what a pod has and a local process does not is
// changed: the listen addresses, a certificate directory, the extra name
// "localhost" on the certificate, and the kubeconfig.
func startOperator(t *testing.T, dep *appsv1.Deployment, webhookPort int) *operator {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	tmpl := dep.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name + "-local", Labels: tmpl.Labels},
		Spec:       tmpl.Spec,
	}
	pod.Spec.NodeName = "node-1"
	g.Expect(admin.Create(ctx, pod)).To(Succeed())
	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts(dep.Namespace).CreateToken(ctx, tmpl.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "operator.kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["operator"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "operator"}
	kc.CurrentContext = "operator"
	g.Expect(clientcmd.WriteToFile(*kc, kubeconfig)).To(Succeed())

	o := &operator{
		log:         &harness.SyncBuffer{},
		exited:      make(chan struct{}),
		probeAddr:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		webhookAddr: fmt.Sprintf("localhost:%d", webhookPort),
		cfg:         rest.AnonymousClientConfig(env.Config),
		user:        "system:serviceaccount:" + dep.Namespace + ":" + tmpl.Spec.ServiceAccountName,
	}
	o.cfg.BearerToken = tr.Status.Token
	_, port, _ := net.SplitHostPort(o.webhookAddr)
	args := append(append([]string(nil), tmpl.Spec.Containers[0].Args...),
		"--webhook-host=127.0.0.1",
		"--webhook-port="+port,
		"--webhook-cert-dir="+filepath.Join(dir, "certs"),
		"--webhook-cert-extra-dns-name=localhost",
		"--health-probe-bind-address="+o.probeAddr,
		"--metrics-bind-address="+o.metricsAddr,
	)
	o.cmd = exec.Command(image.files[tmpl.Spec.Containers[0].Command[0]], args...)
	o.cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), kubeletEnv(t, tmpl.Spec.Containers[0], dep.Namespace)...)
	o.cmd.Stdout, o.cmd.Stderr = o.log, o.log
	g.Expect(o.cmd.Start()).To(Succeed())
	go func() {
		_ = o.cmd.Wait()
		close(o.exited)
	}()
	t.Cleanup(func() {
		_ = o.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-o.exited:
		case <-time.After(30 * time.Second):
			_ = o.cmd.Process.Kill()
			<-o.exited
		}
		if t.Failed() {
			t.Logf("operator log:\n%s", o.log.String())
		}
	})
	return o
}

// ready asks the operator's readiness endpoint, as the kubelet does.
func (o *operator) ready() error {
	resp, err := http.Get("http://" + o.probeAddr + "/readyz?verbose")
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

func (o *operator) running() bool {
	select {
	case <-o.exited:
		return false
	default:
		return true
	}
}

// servedCertificate is the leaf certificate the webhook server presents.
func (o *operator) servedCertificate() (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", o.webhookAddr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test verifies the chain itself
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// pointWebhooksAt rewrites the clientConfig of the installed webhook
// configurations to call the local operator by URL, as envtest does for a
// webhook server outside the cluster; the CA bundle is left out, for the
// operator to inject.
func pointWebhooksAt(t *testing.T, c corev1.Container, addr string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	url := func(cc *admissionregistrationv1.WebhookClientConfig) {
		g.Expect(cc.Service).NotTo(BeNil())
		u := "https://" + addr + *cc.Service.Path
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &u}
	}
	for _, n := range args(c, "validating-webhook-configuration") {
		w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: n}, w)).To(Succeed())
		for i := range w.Webhooks {
			url(&w.Webhooks[i].ClientConfig)
		}
		g.Expect(admin.Update(ctx, w)).To(Succeed())
	}
	for _, n := range args(c, "mutating-webhook-configuration") {
		w := &admissionregistrationv1.MutatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: n}, w)).To(Succeed())
		for i := range w.Webhooks {
			url(&w.Webhooks[i].ClientConfig)
		}
		g.Expect(admin.Update(ctx, w)).To(Succeed())
	}
}

// caBundles are the CA bundles of every webhook the operator serves.
func caBundles(t *testing.T, c corev1.Container) [][]byte {
	t.Helper()
	g := NewWithT(t)
	var out [][]byte
	for _, n := range args(c, "validating-webhook-configuration") {
		w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(context.Background(), client.ObjectKey{Name: n}, w)).To(Succeed())
		for _, h := range w.Webhooks {
			out = append(out, h.ClientConfig.CABundle)
		}
	}
	for _, n := range args(c, "mutating-webhook-configuration") {
		w := &admissionregistrationv1.MutatingWebhookConfiguration{}
		g.Expect(admin.Get(context.Background(), client.ObjectKey{Name: n}, w)).To(Succeed())
		for _, h := range w.Webhooks {
			out = append(out, h.ClientConfig.CABundle)
		}
	}
	return out
}

// TestOperatorInstalledByTheChart installs the chart, then runs the image's
// manager with the chart's ServiceAccount and flags: it must provision its
// certificate and inject the CA, become Ready, do its work through the API
// server's webhook calls with the RBAC the chart grants and no more, and
// keep admission working through certificate rotations without a restart.
func TestOperatorInstalledByTheChart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	out, err := helm(t, "install", defaultRelease, chartDir, "--namespace", defaultNamespace, "--create-namespace")
	g.Expect(err).NotTo(HaveOccurred(), out)
	t.Cleanup(func() {
		if out, err := helm(t, "uninstall", defaultRelease, "--namespace", defaultNamespace, "--wait"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	dep := &appsv1.Deployment{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: defaultNamespace, Name: "fencedlease-controller-manager"}, dep)).To(Succeed())
	c := dep.Spec.Template.Spec.Containers[0]
	secretKey := client.ObjectKey{Namespace: defaultNamespace, Name: args(c, "webhook-cert-secret")[0]}
	secret := &corev1.Secret{}
	g.Expect(admin.Get(ctx, secretKey, secret)).To(Succeed())
	g.Expect(secret.Data).To(BeEmpty(), "the operator starts with no certificate")

	webhookPort := freePort(t)
	pointWebhooksAt(t, c, fmt.Sprintf("localhost:%d", webhookPort))
	for _, b := range caBundles(t, c) {
		g.Expect(b).To(BeEmpty())
	}
	op := startOperator(t, dep, webhookPort)

	t.Run("provisions its certificate, injects the CA and becomes Ready", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(op.ready).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		g.Expect(admin.Get(ctx, secretKey, secret)).To(Succeed())
		g.Expect(secret.Data).To(HaveKey("ca.crt"))
		g.Expect(secret.Data).To(HaveKey("tls.crt"))
		g.Expect(secret.Data).To(HaveKey("tls.key"))
		for _, b := range caBundles(t, c) {
			g.Expect(b).To(Equal(secret.Data["ca.crt"]))
		}
		leaf, err := op.servedCertificate()
		g.Expect(err).NotTo(HaveOccurred())
		roots := x509.NewCertPool()
		g.Expect(roots.AppendCertsFromPEM(secret.Data["ca.crt"])).To(BeTrue())
		for _, name := range []string{args(c, "webhook-service")[0] + "." + defaultNamespace + ".svc", "localhost"} {
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			g.Expect(err).NotTo(HaveOccurred(), name)
		}
	})

	t.Run("a CA bundle changed by someone else is put right", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(admin.Get(ctx, secretKey, secret)).To(Succeed())
		w := &admissionregistrationv1.MutatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: args(c, "mutating-webhook-configuration")[0]}, w)).To(Succeed())
		w.Webhooks[0].ClientConfig.CABundle = secret.Data["tls.crt"] // a certificate, but not the CA
		g.Expect(admin.Update(ctx, w)).To(Succeed())
		g.Eventually(func(g Gomega) {
			for _, b := range caBundles(t, c) {
				g.Expect(b).To(Equal(secret.Data["ca.crt"]))
			}
			g.Expect(op.ready()).To(Succeed())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	wns, err := testenv.Namespace(ctx, admin, "workload")
	g.Expect(err).NotTo(HaveOccurred())
	allowWrites(t, wns)

	t.Run("grants, hands over and fences through the API server's webhook calls", func(t *testing.T) {
		lockAndFence(t, wns)
	})
	t.Run("the helm test hook's FencedLease and pod work", func(t *testing.T) {
		helmTestHook(t)
	})
	t.Run("least privilege", func(t *testing.T) {
		leastPrivilege(t, op, wns)
	})
	t.Run("serves its metrics to the chart's metrics-reader only", func(t *testing.T) {
		scrapeMetrics(t, op, wns)
	})
	t.Run("the API server gives its requests the chart's priority level", func(t *testing.T) {
		flowControlled(t, op)
	})
	t.Run("a server certificate rotation keeps admission working", func(t *testing.T) {
		g := NewWithT(t)
		before, err := op.servedCertificate()
		g.Expect(err).NotTo(HaveOccurred())
		bundles := caBundles(t, c)
		probe := startAdmissionProbe(t, wns)
		// What the rotator does when the certificate nears its end: a new
		// one, from the same CA.
		g.Expect(admin.Patch(ctx, secret, client.RawPatch(types.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/data/tls.crt"},{"op":"remove","path":"/data/tls.key"}]`)))).To(Succeed())
		g.Eventually(func() ([]byte, error) {
			leaf, err := op.servedCertificate()
			if err != nil {
				return nil, err
			}
			return leaf.Raw, nil
		}).WithTimeout(timeout).WithPolling(poll).ShouldNot(Equal(before.Raw))
		after := probe.calls()
		g.Eventually(probe.calls).WithTimeout(timeout).Should(BeNumerically(">=", after+5))
		g.Expect(probe.stop()).To(BeEmpty(), "every admission call during the rotation reached the webhook")
		g.Expect(caBundles(t, c)).To(Equal(bundles), "the CA did not change")
		g.Expect(op.ready()).To(Succeed())
	})
	t.Run("a CA rotation is injected and admission works again without a restart", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(admin.Get(ctx, secretKey, secret)).To(Succeed())
		oldCA := secret.Data["ca.crt"]
		g.Expect(admin.Patch(ctx, secret, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/data"}]`)))).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, secretKey, secret)).To(Succeed())
			g.Expect(secret.Data["ca.crt"]).NotTo(BeEmpty())
			g.Expect(secret.Data["ca.crt"]).NotTo(Equal(oldCA))
			for _, b := range caBundles(t, c) {
				g.Expect(b).To(Equal(secret.Data["ca.crt"]))
			}
			g.Expect(op.ready()).To(Succeed())
			g.Expect(admissionReached(ctx, wns)).To(Succeed())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		g.Expect(op.running()).To(BeTrue(), "the operator was not restarted")
	})

	g.Expect(op.running()).To(BeTrue())
	// Every API call the operator made was allowed: RBAC granted what it
	// needs.
	g.Expect(op.log.String()).NotTo(ContainSubstring("forbidden"))
	g.Expect(op.log.String()).To(ContainSubstring(imageVersion), "the operator logs the version it was built with")
	g.Expect(op.log.String()).To(ContainSubstring("Set the Go runtime's soft memory limit"), "the chart passes the memory limit")
}

// kubeletEnv is the environment the kubelet gives the container, from its
// env: the values it sets itself and the downward API fields the chart
// uses. Any other source fails the test, so that a new one is added here.
func kubeletEnv(t *testing.T, c corev1.Container, namespace string) []string {
	t.Helper()
	var out []string
	for _, e := range c.Env {
		switch from := e.ValueFrom; {
		case from == nil:
			out = append(out, e.Name+"="+e.Value)
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.namespace":
			out = append(out, e.Name+"="+namespace)
		case from.ResourceFieldRef != nil && from.ResourceFieldRef.Resource == "limits.memory":
			limit := c.Resources.Limits.Memory()
			if limit.IsZero() {
				t.Fatalf("env %s: the container has no memory limit", e.Name)
			}
			out = append(out, fmt.Sprintf("%s=%d", e.Name, limit.Value()))
		default:
			t.Fatalf("env %s: a source the test does not resolve: %+v", e.Name, from)
		}
	}
	return out
}

// allowWrites lets the pods of the namespace write ConfigMaps: RBAC lets
// them, only the fencing webhook stands in the way.
func allowWrites(t *testing.T, ns string) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}},
	})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
	})).To(Succeed())
}

const denied = `admission webhook "protected.fencedlease.io" denied the request: `

// admissionReached makes one admission call through the API server: a
// dry-run write of a protected ConfigMap without a fence, which the fencing
// webhook must deny. An error that does not come from the webhook (it could
// not be called: TLS, connection) is returned.
func admissionReached(ctx context.Context, ns string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe",
		Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "probe"}}}
	err := admin.Create(ctx, cm, client.DryRunAll)
	switch {
	case err == nil:
		return fmt.Errorf("a protected write without a fence was admitted")
	case strings.Contains(err.Error(), denied+"ConfigMap "+ns+"/probe: write rejected: no fencedlease.io/fence annotation"):
		return nil
	default:
		return err
	}
}

type admissionProbe struct {
	mu       sync.Mutex
	n        int
	failures []string
	done     chan struct{}
	finished chan struct{}
}

// startAdmissionProbe makes admission calls through the API server, one
// after the other, until stopped.
func startAdmissionProbe(t *testing.T, ns string) *admissionProbe {
	p := &admissionProbe{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(p.finished)
		for {
			select {
			case <-p.done:
				return
			default:
			}
			err := admissionReached(context.Background(), ns)
			p.mu.Lock()
			p.n++
			if err != nil {
				p.failures = append(p.failures, err.Error())
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *admissionProbe) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *admissionProbe) stop() []string {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	<-p.finished
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failures
}

// lockAndFence: two candidates, the one ready longest is granted; its write
// is admitted, the standby's is not; when it stops being eligible the other
// is granted a higher fence, and the old holder's write is rejected as
// stale.
func lockAndFence(t *testing.T, ns string) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	checker, err := testenv.WatchHolders(ctx, env.Config, ns)
	g.Expect(err).NotTo(HaveOccurred())

	labels := map[string]string{"app": "exporter"}
	fl := testenv.FencedLease(ns, "exporter", labels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Takeover = fencingv1alpha1.TakeoverImmediate
	})
	g.Expect(admin.Create(ctx, fl)).To(Succeed())
	// Reconciled: the operator's cache, which the pod webhook reads, has it.
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(fl), fl)).To(Succeed())
		g.Expect(fl.Status.ObservedGeneration).To(Equal(fl.Generation))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	pods := map[string]*corev1.Pod{}
	for i, name := range []string{"exporter-0", "exporter-1"} {
		pod, err := testenv.CreatePod(ctx, admin, testenv.Pod{Namespace: ns, Name: name, ServiceAccount: "default",
			Labels: map[string]string{"app": "exporter", fencingv1alpha1.LabelInject: "true"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pod.Spec.Containers[0].VolumeMounts).To(ContainElement(HaveField("MountPath", "/etc/fencedlease")), "the pod webhook mounted the token files")
		g.Expect(testenv.SetReady(ctx, admin, pod, time.Now().Add(-time.Duration(10-i)*time.Minute))).To(Succeed())
		pods[name] = pod
	}

	holder := func(g Gomega) (string, int64) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(fl), fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		pod := &corev1.Pod{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: fl.Status.Holder.PodName}, pod)).To(Succeed())
		g.Expect(pod.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationRole, fencingv1alpha1.RoleHolder))
		g.Expect(pod.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(fl.Status.Fence, 10)))
		return fl.Status.Holder.PodName, fl.Status.Fence
	}
	var first string
	var fence1 int64
	g.Eventually(func(g Gomega) {
		first, fence1 = holder(g)
		g.Expect(first).To(Equal("exporter-0"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

	write := func(pod string, fence int64) error {
		pc, err := testenv.PodClient(ctx, env.Config, pods[pod])
		g.Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{}
		err = pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "export-state"}, cm)
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "export-state",
				Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "exporter"}}}
		} else if err != nil {
			return err
		}
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[fencingv1alpha1.AnnotationFence] = strconv.FormatInt(fence, 10)
		cm.Data = map[string]string{"written-by": pod}
		if cm.ResourceVersion == "" {
			return pc.Create(ctx, cm)
		}
		return pc.Update(ctx, cm)
	}
	g.Expect(write("exporter-0", fence1)).To(Succeed())
	g.Expect(write("exporter-1", fence1)).To(MatchError(ContainSubstring(
		fmt.Sprintf("%sConfigMap %s/export-state: write with fence %d rejected: pod exporter-1 is not the holder", denied, ns, fence1))))

	// The holder's containers stop being ready: the other pod takes over.
	g.Expect(testenv.SetContainersNotReady(ctx, admin, pods["exporter-0"])).To(Succeed())
	var second string
	var fence2 int64
	g.Eventually(func(g Gomega) {
		second, fence2 = holder(g)
		g.Expect(second).To(Equal("exporter-1"))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	g.Expect(fence2).To(BeNumerically(">", fence1))

	g.Expect(write("exporter-0", fence1)).To(MatchError(ContainSubstring(
		fmt.Sprintf(`%sConfigMap %s/export-state: write with fence %d rejected: stale holder: FencedLease "exporter" is at fence %d`, denied, ns, fence1, fence2))))
	g.Expect(write("exporter-1", fence2)).To(Succeed())
	g.Expect(checker.Violations()).To(BeEmpty())
}

// helmTestHook creates what helm test creates, in a namespace the webhooks
// cover: the pod gets its token files and is granted the lease, which is
// what "fence run -- fence token" waits for (no kubelet runs the container
// here).
func helmTestHook(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, err := testenv.Namespace(ctx, admin, "helm-test")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := helm(t, "template", defaultRelease, chartDir, "--namespace", defaultNamespace, "--set", "tests.namespace="+ns, "--show-only", "templates/tests/test-holder.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	objs := decode(t, out)
	fl := into[fencingv1alpha1.FencedLease](t, find(t, objs, "FencedLease", "fencedlease-test"))
	g.Expect(admin.Create(ctx, fl)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(fl), fl)).To(Succeed())
		g.Expect(fl.Status.ObservedGeneration).To(Equal(fl.Generation))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	pod := into[corev1.Pod](t, find(t, objs, "Pod", "fencedlease-test"))
	pod.Spec.NodeName = "node-1"
	g.Expect(admin.Create(ctx, pod)).To(Succeed())
	g.Expect(pod.Spec.Containers[0].VolumeMounts).To(ContainElement(HaveField("MountPath", "/etc/fencedlease")))
	g.Expect(testenv.SetReady(ctx, admin, pod, time.Now())).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationRole, fencingv1alpha1.RoleHolder))
		g.Expect(pod.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, Not(BeEmpty())))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
}

// leastPrivilege: what the operator's identity may and may not do, asked of
// the API server's authorizer, and one real call.
func leastPrivilege(t *testing.T, op *operator, wns string) {
	g := NewWithT(t)
	ctx := context.Background()
	// Asked by the operator's identity itself.
	cs, err := kubernetes.NewForConfig(op.cfg)
	g.Expect(err).NotTo(HaveOccurred())
	type access struct {
		ns, verb, group, resource, name string
		allowed                         bool
	}
	ns := defaultNamespace
	for _, a := range []access{
		// Secrets of workloads: never read, never written.
		{wns, "get", "", "secrets", "", false},
		{wns, "get", "", "secrets", "db-password", false},
		{wns, "watch", "", "secrets", "", false},
		{wns, "create", "", "secrets", "", false},
		{wns, "update", "", "secrets", "", false},
		{wns, "delete", "", "secrets", "", false},
		{"", "get", "", "secrets", "", false},
		{"", "watch", "", "secrets", "", false},
		{wns, "list", "", "secrets", "", false},
		{"", "list", "", "secrets", "", false},
		{wns, "list", "", "configmaps", "", false},
		// Nodes, to tell a lost node: read only.
		{"", "watch", "", "nodes", "", true},
		{"", "update", "", "nodes", "", false},
		// Its own certificate Secret, in its own namespace.
		{ns, "get", "", "secrets", "fencedlease-webhook-cert", true},
		{ns, "update", "", "secrets", "fencedlease-webhook-cert", true},
		{ns, "update", "", "secrets", "another-secret", false},
		{ns, "delete", "", "secrets", "fencedlease-webhook-cert", false},
		// The Secret of the webhooks' path token, which it creates in its own
		// namespace (RBAC cannot narrow create to one name) and changes only
		// to replace a token of the earlier format.
		{ns, "create", "", "secrets", "", true},
		{ns, "get", "", "secrets", "fencedlease-webhook-token", true},
		{ns, "update", "", "secrets", "fencedlease-webhook-token", true},
		{ns, "update", "", "secrets", "another-secret-too", false},
		{ns, "delete", "", "secrets", "fencedlease-webhook-token", false},
		// Only its own webhook configurations, and only their update (the CA
		// bundle, the path token).
		{"", "update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "fencedlease-fencing", true},
		{"", "update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "fencedlease-pod-injector", true},
		{"", "update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "another-webhook", false},
		{"", "update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "another-webhook", false},
		{"", "delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "fencedlease-fencing", false},
		{"", "delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "fencedlease-pod-injector", false},
		{"", "create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", false},
		// No way to act as a workload's pod, or to widen its own rights.
		{wns, "create", "", "serviceaccounts/token", "default", false},
		{wns, "create", "", "pods/exec", "", false},
		{wns, "create", "", "pods", "", false},
		{wns, "delete", "", "pods", "", false},
		{wns, "update", "", "configmaps", "", false},
		{"", "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", false},
		{"", "escalate", "rbac.authorization.k8s.io", "clusterroles", "", false},
		{"", "impersonate", "", "users", "", false},
		// What it needs: its Leases, pods' annotations, its CRD.
		{wns, "update", "coordination.k8s.io", "leases", "", true},
		{wns, "patch", "", "pods", "", true},
		{wns, "patch", "", "pods/status", "", true},
		{wns, "patch", "fencing.fencedlease.io", "fencedleases/status", "", true},
		{ns, "update", "coordination.k8s.io", "leases", "fencedlease-operator", true},
	} {
		res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: resourceOf(a.resource), Subresource: subresourceOf(a.resource), Name: a.name,
			}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Status.Allowed).To(Equal(a.allowed), "%s %s %s/%s %q in namespace %q", op.user, a.verb, a.group, a.resource, a.name, a.ns)
	}

	// A real call with the operator's token.
	g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: wns, Name: "db-password"},
		StringData: map[string]string{"password": "hunter2"}})).To(Succeed())
	oc, err := client.New(op.cfg, client.Options{Scheme: setup.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	err = oc.Get(ctx, client.ObjectKey{Namespace: wns, Name: "db-password"}, &corev1.Secret{})
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf(`secrets "db-password" is forbidden: User "%s" cannot get resource "secrets" in API group "" in the namespace "%s"`, op.user, wns)))
}

func resourceOf(r string) string {
	res, _, _ := strings.Cut(r, "/")
	return res
}

func subresourceOf(r string) string {
	_, sub, _ := strings.Cut(r, "/")
	return sub
}

// scrapeMetrics: the operator's metrics endpoint, with the chart's flags and
// RBAC, serves a service account bound to the chart's metrics-reader
// ClusterRole (the lease of lockAndFence and the served certificate's
// expiry among the series), and refuses a scrape without a token (401) or
// by a service account without the binding (403).
func scrapeMetrics(t *testing.T, op *operator, wns string) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-fencedlease-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: defaultRelease + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: wns, Name: "prometheus"}},
	})).To(Succeed())
	t.Cleanup(func() {
		_ = admin.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-fencedlease-metrics"}})
	})
	reader, err := testenv.ServiceAccountToken(ctx, env, wns, "prometheus")
	g.Expect(err).NotTo(HaveOccurred())
	stranger, err := testenv.ServiceAccountToken(ctx, env, wns, "stranger")
	g.Expect(err).NotTo(HaveOccurred())
	leaf, err := op.servedCertificate()
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		code, fams, err := testenv.Scrape(ctx, op.metricsAddr, reader)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		grants, ok := harness.Sample(fams, "fencedlease_grants_total", map[string]string{"namespace": wns, "name": "exporter"})
		g.Expect(ok).To(BeTrue(), "the lease of lockAndFence has its series")
		g.Expect(grants).To(BeNumerically(">=", 2), "lockAndFence hands the lease over once")
		expiry, ok := harness.Sample(fams, "fencedlease_certificate_expiry_timestamp_seconds", map[string]string{"certificate": "webhook"})
		g.Expect(ok).To(BeTrue())
		g.Expect(int64(expiry)).To(Equal(leaf.NotAfter.Unix()), "the expiry of the certificate the webhook server serves")
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	code, fams, err := testenv.Scrape(ctx, op.metricsAddr, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	g.Expect(fams).To(BeNil())
	code, _, err = testenv.Scrape(ctx, op.metricsAddr, stranger)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden))
}
