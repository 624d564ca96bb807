package cluster

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/harness"
)

// startHA starts an attached HA control plane (etcd members and API servers
// only) for the test.
func startHA(t *testing.T) *Cluster {
	t.Helper()
	bin := os.Getenv("KUBEBUILDER_ASSETS")
	if bin == "" {
		bin = harness.ControlPlaneDir()
	}
	c, err := New(Config{Dir: t.TempDir(), K8sBin: bin, HA: true, ControlPlaneOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Up(ctx); err != nil {
		t.Fatalf("start the HA control plane: %v", err)
	}
	t.Cleanup(func() { _ = c.Down() })
	return c
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 5 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHAControlPlane: the HA control plane's faults do what they say — a
// leader moved is the leader, a killed member is down and the API keeps
// working through the others, a cut API server is unreachable directly and
// avoided by the balancer, a stopped API server likewise until it is back —
// and the storage watch delivers every version, in order, with the
// resourceVersions the API servers returned, through all of it.
func TestHAControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd members and two kube-apiservers")
	}
	g := NewWithT(t)
	c := startHA(t)
	ctx := context.Background()
	admin := newClient(t, c.RestConfig)
	g.Expect(c.APIServers()).To(Equal(2))
	g.Expect(c.EtcdMembers()).To(Equal(3))
	for i := range c.APIServers() {
		g.Expect(newClient(t, c.APIServerConfig(i)).List(ctx, &corev1.NamespaceList{})).To(Succeed(), "API server %d directly", i)
	}

	// Every version of a ConfigMap, as the storage watch delivers it.
	var mu sync.Mutex
	seen := map[string]string{} // resourceVersion -> value
	var order []int64
	gaps := 0
	g.Expect(c.FollowStorage(ctx, metav1.NamespaceDefault, &corev1.ConfigMapList{}, func() { mu.Lock(); gaps++; mu.Unlock() },
		func(_ watch.EventType, o runtime.Object) {
			cm := o.(*corev1.ConfigMap)
			if cm.Name != "ha" {
				return
			}
			rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
			mu.Lock()
			seen[cm.ResourceVersion] = cm.Data["v"]
			order = append(order, rv)
			mu.Unlock()
		})).To(Succeed())
	written := map[string]string{}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "ha"}, Data: map[string]string{"v": "0"}}
	g.Expect(admin.Create(ctx, cm)).To(Succeed())
	written[cm.ResourceVersion] = "0"
	n := 0
	write := func(cl client.Client) {
		t.Helper()
		n++
		cm.Data["v"] = strconv.Itoa(n)
		g.Eventually(func() error { return cl.Update(ctx, cm) }).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "write %d", n)
		written[cm.ResourceVersion] = cm.Data["v"]
	}

	// The leader moves where it is sent.
	leader, _, err := c.EtcdLeader(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	to := (leader + 1) % 3
	from, err := c.MoveEtcdLeader(ctx, to)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(from).To(Equal(leader))
	g.Eventually(func() (int, error) { l, _, err := c.EtcdLeader(ctx); return l, err }).WithTimeout(10 * time.Second).Should(Equal(to))
	write(admin)

	// The leader killed: the others elect one, the API keeps working.
	g.Expect(c.KillEtcdMember(to)).To(Succeed())
	g.Expect(c.EtcdMemberRunning(to)).To(BeFalse())
	write(admin)
	g.Eventually(func() (int, error) { l, _, err := c.EtcdLeader(ctx); return l, err }).WithTimeout(10 * time.Second).ShouldNot(Equal(to))
	g.Expect(c.StartEtcdMember(ctx, to)).To(Succeed())
	st, err := c.EtcdStatus(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(HaveLen(3), "every member answers again")
	write(admin)

	// API server 0 cut off: unreachable directly, avoided by the balancer.
	g.Expect(c.CutAPIServer(0)).To(Succeed())
	g.Expect(newClient(t, c.APIServerConfig(0)).List(ctx, &corev1.NamespaceList{})).NotTo(Succeed(), "API server 0 is cut off")
	for range 4 {
		g.Expect(newClient(t, c.RestConfig).List(ctx, &corev1.NamespaceList{})).To(Succeed(), "through the balancer")
	}
	write(newClient(t, c.RestConfig))
	g.Expect(c.HealAPIServer(0)).To(Succeed())
	g.Expect(newClient(t, c.APIServerConfig(0)).List(ctx, &corev1.NamespaceList{})).To(Succeed(), "API server 0 healed")

	// API server 1 crashed, then back.
	g.Expect(c.StopAPIServer(1, true)).To(Succeed())
	g.Expect(c.APIServerRunning(1)).To(BeFalse())
	g.Expect(newClient(t, c.APIServerConfig(1)).List(ctx, &corev1.NamespaceList{})).NotTo(Succeed(), "API server 1 is down")
	write(newClient(t, c.RestConfig))
	g.Expect(c.StartAPIServer(ctx, 1)).To(Succeed())
	write(newClient(t, c.APIServerConfig(1)))

	g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }).WithTimeout(10 * time.Second).Should(Equal(len(written)))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(seen).To(Equal(written), "the storage watch saw every version with its resourceVersion")
	for i := 1; i < len(order); i++ {
		g.Expect(order[i]).To(BeNumerically(">", order[i-1]), "in order")
	}
	g.Expect(gaps).To(BeZero())
}
