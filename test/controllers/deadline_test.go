package controllers_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/pkg/fence"
	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// probe is a runnable that needs leader election and records when it ran.
type probe struct {
	mu               sync.Mutex
	started, stopped time.Time
	fence            int64
}

func (p *probe) Start(ctx context.Context) error {
	p.mu.Lock()
	p.started = time.Now()
	p.fence, _ = fencedcontroller.FenceFromContext(ctx)
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	p.stopped = time.Now()
	p.mu.Unlock()
	return nil
}

func (p *probe) times() (started, stopped time.Time, fenceValue int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started, p.stopped, p.fence
}

// TestManagerStopsBeforeItsDeadline runs a manager of pkg/fencedcontroller
// in the test process, as pod a with its bound token, against the operator
// and its webhook on a real API server (FencedLease with renewal Holder,
// 3 s lease renewed every second, 500 ms margin):
//   - its runnable that needs leader election does not start while a is not
//     granted, and starts once it is; the manager's client writes a
//     protected ConfigMap, stamped with the grant's fence, and the webhook
//     admits it;
//   - then a is cut off from the API server (every request of its Session
//     fails before it is sent): its renewals fail, and the runnable is
//     stopped, and the manager's Start returns ErrLeaderElectionLost,
//     before a's deadline (its last accepted renewal's send time plus the
//     lease duration, minus the margin), though not before the renewal that
//     fell due had half the time left to succeed; from then on the client
//     refuses to write.
func TestManagerStopsBeforeItsDeadline(t *testing.T) {
	f := newFixture(t)
	f.g.Expect(admin.Create(f.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
	})).To(Succeed())
	f.g.Expect(admin.Create(f.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "default"}},
	})).To(Succeed())
	f.startOperator()
	const lease, margin = 3 * time.Second, 500 * time.Millisecond
	f.g.Expect(admin.Create(f.ctx, testenv.FencedLease(f.ns, "widgets", podLabels, func(fl *fencingv1alpha1.FencedLease) {
		fl.Spec.Renewal = fencingv1alpha1.RenewalHolder
		fl.Spec.LeaseDurationSeconds = int32(lease / time.Second)
		fl.Spec.RenewIntervalSeconds = ptr.To(int32(1))
	}))).To(Succeed())
	a := f.pod("a")
	token, err := testenv.PodToken(f.ctx, env.Config, a)
	f.g.Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	var cut atomic.Bool
	api := &fence.APIConfig{Host: env.Config.Host, CAData: env.Config.CAData, Token: func() (string, error) {
		if cut.Load() {
			return "", errors.New("cut off from the API server")
		}
		return token, nil
	}}
	skip := true
	mgr, err := fencedcontroller.NewManager(cfg, manager.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
		Controller: config.Controller{SkipNameValidation: &skip},
	}, fencedcontroller.Options{Lease: "widgets", Namespace: f.ns, API: api, Margin: margin, FieldManager: "deadline-test"})
	f.g.Expect(err).NotTo(HaveOccurred())
	p := &probe{}
	f.g.Expect(mgr.Add(p)).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(f.ctx) }()

	time.Sleep(2 * time.Second)
	started, _, _ := p.times()
	f.g.Expect(started).To(BeZero(), "the runnable started before the pod was granted")
	f.g.Expect(mgr.Elected()).NotTo(BeClosed())
	err = mgr.GetClient().Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "early"}})
	f.g.Expect(errors.Is(err, fence.ErrNotHolder)).To(BeTrue(), "%v", err)

	f.ready(a, time.Hour)
	f.g.Eventually(func() time.Time { s, _, _ := p.times(); return s }).WithTimeout(timeout).ShouldNot(BeZero())
	f.g.Expect(mgr.Elected()).To(BeClosed())
	// The pod follows the Lease, whose commit comes before the status that
	// records it: the status shows the grant held, soon after.
	_, _, held := p.times()
	f.g.Eventually(func() (int64, error) {
		fl := &fencingv1alpha1.FencedLease{}
		err := admin.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "widgets"}, fl)
		return fl.Status.Fence, err
	}).WithTimeout(timeout).Should(Equal(held), "the FencedLease's status records the grant the manager holds")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "state",
		Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: "widgets"}}, Data: map[string]string{"k": "v"}}
	f.g.Expect(mgr.GetClient().Create(f.ctx, cm)).To(Succeed(), "the holder's stamped write is admitted")
	f.g.Expect(cm.Annotations).To(HaveKeyWithValue(fencingv1alpha1.AnnotationFence, strconv.FormatInt(held, 10)))
	// A JSON patch and a server-side apply through the client are admitted
	// too: both carry the fence.
	c := mgr.GetClient()
	f.g.Expect(c.Patch(f.ctx, cm, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/k","value":"j"}]`)))).To(Succeed())
	f.g.Expect(c.Apply(f.ctx, corev1ac.ConfigMap("state", f.ns).WithLabels(map[string]string{fencingv1alpha1.LabelProtectedBy: "widgets"}).
		WithData(map[string]string{"applied": "yes"}), client.FieldOwner("deadline-test"))).To(Succeed())
	f.g.Expect(admin.Get(f.ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	f.g.Expect(cm.Data).To(Equal(map[string]string{"k": "j", "applied": "yes"}))

	time.Sleep(1500 * time.Millisecond) // a renews on
	cutAt := time.Now()
	cut.Store(true)
	var stopErr error
	f.g.Eventually(done).WithTimeout(timeout).Should(Receive(&stopErr))
	returned := time.Now()
	leaseObj := &coordinationv1.Lease{}
	f.g.Expect(admin.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "widgets"}, leaseObj)).To(Succeed())
	lastRenewal := leaseObj.Spec.RenewTime.Time
	deadline := lastRenewal.Add(lease - margin)
	_, stopped, _ := p.times()
	t.Logf("cut %s after the last renewal; runnable stopped %s before the deadline, Start returned %s before it",
		cutAt.Sub(lastRenewal).Round(time.Millisecond), deadline.Sub(stopped).Round(time.Millisecond), deadline.Sub(returned).Round(time.Millisecond))
	f.g.Expect(errors.Is(stopErr, fencedcontroller.ErrLeaderElectionLost)).To(BeTrue(), "%v", stopErr)
	f.g.Expect(stopErr.Error()).To(ContainSubstring("was not renewed in time"))
	f.g.Expect(lastRenewal).To(BeTemporally("<", cutAt), "no renewal was accepted after the cut")
	f.g.Expect(stopped).To(BeTemporally("<", deadline))
	f.g.Expect(returned).To(BeTemporally("<", deadline))
	// The renewal that fell due a second after the last one had until half
	// way to the deadline to succeed.
	f.g.Expect(stopped).To(BeTemporally(">=", lastRenewal.Add(time.Second+(lease-margin-time.Second)/2-50*time.Millisecond)))

	cm.Data["k"] = "w"
	err = mgr.GetClient().Update(f.ctx, cm)
	f.g.Expect(errors.Is(err, fence.ErrNotHolder)).To(BeTrue(), "%v", err)
	f.g.Expect(err.Error()).To(MatchRegexp(`^update ConfigMap ` + f.ns + `/state refused before it was sent: not the holder: its grant of FencedLease ` +
		f.ns + `/widgets with fence ` + strconv.FormatInt(held, 10) + ` ended: the grant with fence \d+ was not renewed in time: stopping \S+ (before|after) its deadline( \(the process was paused past it\))?$`))
}
