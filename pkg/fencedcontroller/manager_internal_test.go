package fencedcontroller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

type electing struct {
	probe
	need bool
}

func (e *electing) NeedLeaderElection() bool { return e.need }

type warming struct{ electing }

func (*warming) Warmup(context.Context) error { return nil }

func testConfig() *rest.Config {
	return &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "t"}
}

func testOptions() manager.Options {
	return manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"}
}

// TestManagerAdd: what needs leader election waits for the grant, the rest
// runs on the manager, by controller-runtime's own rule; a warmup runs on
// the manager at once.
func TestManagerAdd(t *testing.T) {
	g := NewWithT(t)
	m, err := NewManager(testConfig(), testOptions(), Options{Namespace: "team-a", Lease: "widgets"})
	g.Expect(err).NotTo(HaveOccurred())
	fm := m.(*fencedManager)
	plain, leader, other, warm := &probe{}, &electing{need: true}, &electing{need: false}, &warming{electing{need: true}}
	for _, r := range []manager.Runnable{plain, leader, other, warm} {
		g.Expect(m.Add(r)).To(Succeed())
	}
	g.Expect(fm.candidate.runnables).To(Equal([]manager.Runnable{plain, leader, warm}))
	g.Expect(needsLeader(fm.candidate)).To(BeFalse())
	g.Expect(needsLeader(warmupOnly{warm})).To(BeFalse())
	g.Expect(needsLeader(m.GetCache())).To(BeFalse())
	g.Expect(needsLeader(m.GetWebhookServer())).To(BeFalse())
	g.Expect(m.GetClient()).To(BeAssignableToTypeOf(&fencedClient{}))
	g.Expect(m.Elected()).NotTo(BeClosed())
	c := m.GetClient().(*fencedClient)
	g.Expect(c.fieldManager).To(Equal("fencedcontroller.test"))
}

func TestNewManagerRefusesLeaderElection(t *testing.T) {
	g := NewWithT(t)
	opts := testOptions()
	opts.LeaderElection = true
	_, err := NewManager(testConfig(), opts, Options{Namespace: "team-a", Lease: "widgets"})
	g.Expect(err).To(MatchError("a FencedLease candidate replaces leader election: turn manager.Options.LeaderElection off"))
	_, err = NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, testOptions(), Options{Namespace: "team-a", Lease: "widgets"})
	g.Expect(err).To(MatchError("FencedLease candidate: the rest.Config has no bearer token: a FencedLease candidate acts with its pod's bound service-account token (rest.InClusterConfig, or a kubeconfig with a token); set Options.API otherwise"))
}
