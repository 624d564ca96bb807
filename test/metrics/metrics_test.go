package metrics_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var (
	env            *testenv.Env
	operatorConfig *rest.Config
)

func TestMain(m *testing.M) {
	if harness.Short() {
		os.Exit(harness.RunNone(m, harness.ControlPlane))
	}
	testenv.MainWithSetup(m, &env, func(ctx context.Context, e *testenv.Env) error {
		var err error
		operatorConfig, err = testenv.OperatorConfig(ctx, e)
		return err
	}, testenv.WithWebhooks())
}

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
)

var appLabels = map[string]string{"app": "singleton"}

// TestMetricsAfterLockServiceAndWebhook: a FencedLease is granted, renewed,
// handed off on request, loses its holder to a pod that is no longer ready;
// the holder writes a protected ConfigMap, a standby and a stale fence are
// rejected. Then an authorized scrape shows each of these in its series, and
// deleting the FencedLease deletes its series.
func TestMetricsAfterLockServiceAndWebhook(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns, err := testenv.Namespace(ctx, env.Client, "metrics")
	g.Expect(err).NotTo(HaveOccurred())
	c := env.Client
	g.Expect(c.Create(ctx, writerRole(ns))).To(Succeed())
	g.Expect(c.Create(ctx, writerBinding(ns))).To(Succeed())

	addr, err := testenv.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	m, err := testenv.StartManager(ctx, operatorConfig, testenv.ManagerOptions{
		Namespace:      ns,
		MetricsAddress: addr,
		Webhooks:       &env.WebhookInstallOptions,
		WebhookOptions: setup.WebhookOptions{OperatorUsers: []string{testenv.OperatorUser}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = m.Stop() }()

	reader, err := testenv.MetricsReaderToken(ctx, env, ns, "prometheus")
	g.Expect(err).NotTo(HaveOccurred())
	if file := os.Getenv("FENCEDLEASE_SCRAPE_LOG"); file != "" {
		stop := recordScrapes(t, ctx, addr, reader, file)
		defer stop()
	}
	scrape := func(g Gomega) map[string]*dto.MetricFamily {
		code, fams, err := testenv.Scrape(ctx, addr, reader)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		return fams
	}
	lease := map[string]string{"namespace": ns, "name": "db"}
	with := func(kv ...string) map[string]string {
		out := map[string]string{"namespace": ns, "name": "db"}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	// The histograms are labelled by takeover mode only: what this test adds
	// to them is the change from here on.
	safe := map[string]string{"takeover": "Safe"}
	// The metrics server may still be starting: the first scrape waits for it.
	var before map[string]*dto.MetricFamily
	g.Eventually(func(g Gomega) { before = scrape(g) }).WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(Succeed())
	holdsBefore, _ := harness.Sample(before, "fencedlease_hold_duration_seconds", safe)
	waitsBefore, _ := harness.Sample(before, "fencedlease_acquisition_wait_seconds", safe)
	waitSumBefore := harness.HistogramSum(before, "fencedlease_acquisition_wait_seconds", safe)

	// Two candidates; a grants, and the operator renews (lease of 3s, renewed every second).
	a := readyPod(t, ctx, ns, "a", time.Hour)
	b := readyPod(t, ctx, ns, "b", time.Minute)
	fl := testenv.FencedLease(ns, "db", appLabels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.LeaseDurationSeconds = 3
		fl.Spec.RenewIntervalSeconds = ptr.To[int32](1)
	})
	g.Expect(c.Create(ctx, fl)).To(Succeed())
	// A FencedShardSet whose 4 shards go to pod w, and one with no pod.
	sets := shardSets(t, ctx, ns)
	holder, fence := waitHolder(t, ctx, ns, "db", 0)
	g.Expect(holder).To(Equal("a"))
	g.Eventually(func(g Gomega) {
		v, _ := harness.Sample(scrape(g), "fencedlease_renewals_total", with("mode", "Operator"))
		g.Expect(v).To(BeNumerically(">=", 2))
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())

	// A handoff request: under Safe the grant is revoked and b is granted
	// once it expired.
	requestHandoff(t, ctx, ns, "db", "2026-12-01T10:00:00Z")
	holder, fence2 := waitHolder(t, ctx, ns, "db", fence)
	g.Expect(holder).To(Equal("b"))

	// The webhook: the holder's write passes, a standby's and a stale one do not.
	holderClient, err := testenv.PodClient(ctx, env.Config, b)
	g.Expect(err).NotTo(HaveOccurred())
	standbyClient, err := testenv.PodClient(ctx, env.Config, a)
	g.Expect(err).NotTo(HaveOccurred())
	cm := protected(ns, fence2)
	g.Expect(holderClient.Create(ctx, cm)).To(Succeed())
	err = standbyClient.Create(ctx, func() *corev1.ConfigMap { o := protected(ns, fence2); o.Name = "other"; return o }())
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a standby's write is denied: %v", err)
	stale := cm.DeepCopy()
	stale.Annotations[fencingv1alpha1.AnnotationFence] = strconv.FormatInt(fence, 10)
	stale.Data = map[string]string{"k": "stale"}
	err = holderClient.Update(ctx, stale)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an update with an older fence is denied: %v", err)
	err = holderClient.Create(ctx, func() *corev1.ConfigMap { o := protected(ns, fence); o.Name = "stale"; return o }())
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a stale fence is denied: %v", err)

	// b's containers stop being ready: its grant ends (not_ready) and a
	// takes over after the expiry.
	g.Expect(testenv.SetContainersNotReady(ctx, c, b)).To(Succeed())
	holder, fence3 := waitHolder(t, ctx, ns, "db", fence2)
	g.Expect(holder).To(Equal("a"))

	g.Eventually(func(g Gomega) {
		fams := scrape(g)
		value := func(name string, labels map[string]string) float64 {
			v, ok := harness.Sample(fams, name, labels)
			g.Expect(ok).To(BeTrue(), "no series %s%v", name, labels)
			return v
		}
		g.Expect(value("fencedlease_grants_total", lease)).To(Equal(3.0))
		g.Expect(value("fencedlease_handoffs_total", with("cause", "manual"))).To(Equal(1.0))
		g.Expect(value("fencedlease_handoffs_total", with("cause", "not_ready"))).To(Equal(1.0))
		g.Expect(value("fencedlease_handoffs_total", lease)).To(Equal(2.0), "no other handoff")
		g.Expect(value("fencedlease_hold_duration_seconds", safe)-holdsBefore).To(Equal(2.0), "two grants ended")
		g.Expect(value("fencedlease_acquisition_wait_seconds", safe)-waitsBefore).To(Equal(3.0), "three grants waited")
		g.Expect(harness.HistogramSum(fams, "fencedlease_acquisition_wait_seconds", safe)-waitSumBefore).To(BeNumerically(">=", 2*2.0),
			"both takeovers under Safe waited for the old grant to expire (3s each, from a renewal at most 1s old)")
		g.Expect(value("fencedlease_expired_while_running_total", lease)).To(BeZero())
		g.Expect(value("fencedlease_fence_regressions_total", lease)).To(BeZero())
		g.Expect(value("fencedlease_fence", lease)).To(Equal(float64(fence3)))
		g.Expect(value("fencedlease_candidates_eligible", lease)).To(Equal(1.0))
		g.Expect(value("fencedlease_holder", lease)).To(Equal(1.0))
		g.Expect(value("fencedlease_lease_duration_seconds", lease)).To(Equal(3.0))
		g.Expect(value("fencedlease_paused", lease)).To(BeZero())
		g.Expect(value("fencedlease_renewal_failures_total", with("mode", "Operator"))).To(BeZero())
		g.Expect(time.Since(time.Unix(int64(value("fencedlease_last_renewal_timestamp_seconds", lease)), 0))).To(BeNumerically("<", 10*time.Second))
		g.Expect(value("fencedlease_holder_state_since_timestamp_seconds", lease)).To(BeNumerically(">", 0))

		g.Expect(value("fencedlease_webhook_decisions_total", map[string]string{"resource": "configmaps", "result": "allowed", "reason": "holder"})).To(Equal(1.0))
		g.Expect(value("fencedlease_webhook_decisions_total", map[string]string{"resource": "configmaps", "result": "denied", "reason": "not_holder"})).To(Equal(1.0))
		g.Expect(value("fencedlease_webhook_decisions_total", map[string]string{"resource": "configmaps", "result": "denied", "reason": "stale_fence"})).To(Equal(2.0))
		g.Expect(value("fencedlease_webhook_duration_seconds", map[string]string{"resource": "configmaps"})).To(BeNumerically(">=", 4))
		expiry := value("fencedlease_certificate_expiry_timestamp_seconds", map[string]string{"certificate": "webhook"})
		g.Expect(time.Unix(int64(expiry), 0)).To(BeTemporally(">", time.Now()))

		work, idle := map[string]string{"namespace": ns, "name": "work"}, map[string]string{"namespace": ns, "name": "idle"}
		g.Expect(value("fencedlease_shardset_shards", work)).To(Equal(4.0))
		g.Expect(value("fencedlease_shardset_shards_owned", work)).To(Equal(4.0))
		g.Expect(value("fencedlease_shardset_pods_eligible", work)).To(Equal(1.0))
		g.Expect(value("fencedlease_shardset_grants_total", work)).To(Equal(4.0), "one grant per shard")
		g.Expect(value("fencedlease_shardset_oldest_unowned_since_timestamp_seconds", work)).To(BeZero())
		g.Expect(value("fencedlease_shardset_lease_duration_seconds", work)).To(Equal(5.0))
		g.Expect(value("fencedlease_shardset_shards_owned", idle)).To(BeZero())
		g.Expect(value("fencedlease_shardset_pods_eligible", idle)).To(BeZero())
		g.Expect(time.Since(time.Unix(int64(value("fencedlease_shardset_oldest_unowned_since_timestamp_seconds", idle)), 0))).To(
			And(BeNumerically(">", 0), BeNumerically("<", 5*time.Minute)), "the shards of set idle have been unowned since it was created")
		writeNames(t, fams)
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())

	// Deleting the FencedLease deletes its series; deleting a set, its.
	g.Expect(c.Delete(ctx, fl)).To(Succeed())
	for _, set := range sets {
		g.Expect(c.Delete(ctx, set)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		fams := scrape(g)
		for _, name := range []string{"fencedlease_shardset_shards", "fencedlease_shardset_shards_owned", "fencedlease_shardset_grants_total",
			"fencedlease_shardset_oldest_unowned_since_timestamp_seconds"} {
			for _, set := range sets {
				_, ok := harness.Sample(fams, name, map[string]string{"namespace": ns, "name": set.Name})
				g.Expect(ok).To(BeFalse(), "%s of the deleted FencedShardSet %s is still served", name, set.Name)
			}
		}
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		fams := scrape(g)
		for _, name := range []string{"fencedlease_grants_total", "fencedlease_handoffs_total", "fencedlease_fence", "fencedlease_holder",
			"fencedlease_renewals_total", "fencedlease_candidates_eligible", "fencedlease_last_renewal_timestamp_seconds"} {
			_, ok := harness.Sample(fams, name, lease)
			g.Expect(ok).To(BeFalse(), "%s of the deleted FencedLease is still served", name)
		}
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestMetricsEndpointRefusesUnauthorizedScrapes: no token, a token the API
// server cannot parse, a forged service-account token (a JWT that claims
// the metrics-reader, signed by a key the API server does not trust), and a
// service account without the metrics-reader role are refused: 401 for the
// first three, as the API server answers them, never a server error; 403
// for the last. The metrics-reader gets the series.
func TestMetricsEndpointRefusesUnauthorizedScrapes(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns, err := testenv.Namespace(ctx, env.Client, "metrics-auth")
	g.Expect(err).NotTo(HaveOccurred())
	addr, err := testenv.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	m, err := testenv.StartManager(ctx, operatorConfig, testenv.ManagerOptions{Namespace: ns, MetricsAddress: addr})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = m.Stop() }()

	reader, err := testenv.MetricsReaderToken(ctx, env, ns, "prometheus")
	g.Expect(err).NotTo(HaveOccurred())
	stranger, err := testenv.ServiceAccountToken(ctx, env, ns, "stranger")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int {
		code, _, _ := testenv.Scrape(ctx, addr, reader)
		return code
	}).WithTimeout(timeout).WithPolling(poll).Should(Equal(http.StatusOK))
	forged := forgedToken(ns, "prometheus")
	for name, token := range map[string]string{"no token": "", "unknown token": "not-a-token", "forged token": forged, "unbound service account": stranger} {
		code, fams, err := testenv.Scrape(ctx, addr, token)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(fams).To(BeNil(), name)
		if name == "unbound service account" {
			g.Expect(code).To(Equal(http.StatusForbidden), name)
		} else {
			g.Expect(code).To(Equal(http.StatusUnauthorized), name)
		}
	}
}

func readyPod(t *testing.T, ctx context.Context, ns, name string, readyFor time.Duration) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	pod, err := testenv.CreatePod(ctx, env.Client, testenv.Pod{Namespace: ns, Name: name, Labels: appLabels, ServiceAccount: "default"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(testenv.SetReady(ctx, env.Client, pod, time.Now().Add(-readyFor).Truncate(time.Second))).To(Succeed())
	return pod
}

// shardSets creates FencedShardSet work, whose 4 shards go to a ready pod
// w, and FencedShardSet idle, whose 2 shards no pod is selected for.
func shardSets(t *testing.T, ctx context.Context, ns string) []*fencingv1alpha1.FencedShardSet {
	t.Helper()
	g := NewWithT(t)
	sharded := map[string]string{"app": "sharded"}
	pod, err := testenv.CreatePod(ctx, env.Client, testenv.Pod{Namespace: ns, Name: "w", Labels: sharded, ServiceAccount: "default"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(testenv.SetReady(ctx, env.Client, pod, time.Now().Add(-time.Minute).Truncate(time.Second))).To(Succeed())
	var out []*fencingv1alpha1.FencedShardSet
	for _, s := range []struct {
		name   string
		labels map[string]string
		shards int32
	}{{"work", sharded, 4}, {"idle", map[string]string{"app": "nobody"}, 2}} {
		set := &fencingv1alpha1.FencedShardSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name},
			Spec: fencingv1alpha1.FencedShardSetSpec{Selector: metav1.LabelSelector{MatchLabels: s.labels}, Shards: s.shards,
				LeaseDurationSeconds: 5, JoinDelaySeconds: ptr.To[int32](0)}}
		g.Expect(env.Client.Create(ctx, set)).To(Succeed())
		out = append(out, set)
	}
	return out
}

// waitHolder waits for a committed holder, published to its pod, with a
// fence greater than after.
func waitHolder(t *testing.T, ctx context.Context, ns, name string, after int64) (string, int64) {
	t.Helper()
	var pod string
	var fence int64
	NewWithT(t).Eventually(func(g Gomega) {
		fl := &fencingv1alpha1.FencedLease{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, fl)).To(Succeed())
		g.Expect(fl.Status.Holder).NotTo(BeNil())
		g.Expect(fl.Status.Fence).To(BeNumerically(">", after))
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: fl.Status.Holder.PodName}, p)).To(Succeed())
		g.Expect(p.Annotations[fencingv1alpha1.AnnotationFence]).To(Equal(strconv.FormatInt(fl.Status.Fence, 10)))
		pod, fence = fl.Status.Holder.PodName, fl.Status.Fence
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return pod, fence
}

func requestHandoff(t *testing.T, ctx context.Context, ns, name, at string) {
	t.Helper()
	fl := &fencingv1alpha1.FencedLease{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, fl)).To(Succeed())
	base := fl.DeepCopy()
	if fl.Annotations == nil {
		fl.Annotations = map[string]string{}
	}
	fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt] = at
	g.Expect(env.Client.Patch(ctx, fl, client.MergeFrom(base))).To(Succeed())
}

func protected(ns string, fence int64) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "config",
		Labels:      map[string]string{fencingv1alpha1.LabelProtectedBy: "db"},
		Annotations: map[string]string{fencingv1alpha1.AnnotationFence: strconv.FormatInt(fence, 10)}},
		Data: map[string]string{"k": "v"}}
}

// writerRole lets the pods' service account write ConfigMaps: RBAC allows
// it, only the webhook stands in the way.
func writerRole(ns string) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}}}}
}

func writerBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}}}
}

// writeNames writes the names of the fencedlease_ series the operator
// serves, with their types, into testdata/metrics.txt: hack/rulecheck checks
// that every alert and dashboard query uses only these. A histogram adds its
// _bucket, _sum and _count series.
func writeNames(t *testing.T, fams map[string]*dto.MetricFamily) {
	var lines []string
	for name, mf := range fams {
		if !strings.HasPrefix(name, "fencedlease_") {
			continue
		}
		lines = append(lines, name+" "+strings.ToLower(mf.GetType().String()))
	}
	sort.Strings(lines)
	data := "# The fencedlease_ series the operator serves (written by test/metrics; read by hack/rulecheck).\n" + strings.Join(lines, "\n") + "\n"
	file := filepath.Join("testdata", "metrics.txt")
	if old, err := os.ReadFile(file); err == nil && string(old) == data {
		return
	}
	if os.Getenv("UPDATE_METRICS_LIST") == "" {
		t.Errorf("%s is out of date: run UPDATE_METRICS_LIST=1 go test ./test/metrics to rewrite it, and commit it; want:\n%s", file, data)
		return
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordScrapes scrapes every 250ms into file, each scrape headed by
// "# scrape <unix milliseconds>", until stop is called: the input of
// hack/rulecheck's dashplot, which draws the dashboard's queries over it.
func recordScrapes(t *testing.T, ctx context.Context, addr, token, file string) (stop func()) {
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			at := time.Now()
			if code, body, err := testenv.ScrapeText(ctx, addr, token); err == nil && code == http.StatusOK {
				fmt.Fprintf(f, "# scrape %d\n%s", at.UnixMilli(), body)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}

// forgedToken is a service-account token for ns/name in the shape the API
// server issues (an RS256 JWT with its claims), signed by a key of its own.
func forgedToken(ns, name string) string {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now().Unix()
	signed := enc(map[string]string{"alg": "RS256", "kid": "forged"}) + "." + enc(map[string]any{
		"iss": "https://kubernetes.default.svc.cluster.local", "sub": "system:serviceaccount:" + ns + ":" + name,
		"aud": []string{"https://kubernetes.default.svc.cluster.local"}, "iat": now, "nbf": now, "exp": now + 3600,
		"kubernetes.io": map[string]any{"namespace": ns, "serviceaccount": map[string]string{"name": name, "uid": "00000000-0000-0000-0000-000000000000"}},
	})
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}
