package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencedlease/fencedlease/pkg/fencedcontroller"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// inProcess is a manager of pkg/fencedcontroller run in the test process
// as a pod, with the pod's bound token, and a probe among its runnables
// that need leader election.
type inProcess struct {
	mgr   manager.Manager
	probe *probe
	done  chan error
	// exited is closed once Start returned.
	exited chan struct{}
	stop   context.CancelFunc
}

// Client is the manager's fencing client.
func (m *inProcess) Client() client.Client { return m.mgr.GetClient() }

// startManager starts a manager as pod, a candidate of FencedLease
// widgets, reaching the API server directly or through proxy (its client
// and its Session alike), with field manager "widget-controller" (the same
// in every replica, as a program's name is) unless o names one.
func (f *fixture) startManager(pod *corev1.Pod, proxy *testenv.APIProxy, o fencedcontroller.Options) *inProcess {
	token, err := testenv.PodToken(f.ctx, env.Config, pod)
	f.g.Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	if proxy != nil {
		cfg = proxy.Config(token)
	}
	if o.Lease == "" {
		o.Lease = "widgets"
	}
	o.Namespace = f.ns
	if o.FieldManager == "" {
		o.FieldManager = "widget-controller"
	}
	skip := true
	mgr, err := fencedcontroller.NewManager(cfg, manager.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
		Controller: config.Controller{SkipNameValidation: &skip},
	}, o)
	f.g.Expect(err).NotTo(HaveOccurred())
	m := &inProcess{mgr: mgr, probe: &probe{}, done: make(chan error, 1), exited: make(chan struct{})}
	f.g.Expect(mgr.Add(m.probe)).To(Succeed())
	ctx, cancel := context.WithCancel(f.ctx)
	m.stop = cancel
	go func() {
		m.done <- mgr.Start(ctx)
		close(m.exited)
	}()
	f.t.Cleanup(func() {
		cancel()
		select {
		case <-m.exited:
		case <-time.After(timeout):
		}
	})
	return m
}

// allow lets the namespace's default service account use verbs on the
// resources of the core group.
func (f *fixture) allow(name string, resources []string, verbs ...string) {
	f.g.Expect(admin.Create(f.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: verbs}},
	})).To(Succeed())
	f.g.Expect(admin.Create(f.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "default"}},
	})).To(Succeed())
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
