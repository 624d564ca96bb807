package protected_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/internal/webhook/scaleguard"
	"github.com/fencedlease/fencedlease/test/testenv"
)

var deployments = schema.GroupResource{Group: "apps", Resource: "deployments"}

// guarded says whether the scale guard names the Deployment.
func (f *fixture) guarded(name string) bool {
	role := &rbacv1.ClusterRole{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: testenv.ScaleGuard.Role}, role)).To(Succeed())
	return scaleguard.Guarded(role.Rules, deployments, f.ns, name)
}

// TestScaleWithTheOperatorDown: the scale webhook is called only for the
// objects the scale guard names, and the write that protects an object has
// it named before it is stored. With the operator down, an unprotected
// Deployment is scaled by anyone, as without the operator; a protected one
// by no one (the webhook cannot be called, and it fails closed).
func TestScaleWithTheOperatorDown(t *testing.T) {
	f := newFixture(t)
	op := f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, _ := f.holderAndStandby()
	protectedBy := map[string]string{fencingv1alpha1.LabelProtectedBy: "db"}

	web := f.deployment("web", protectedBy)
	web.Annotations = map[string]string{fencingv1alpha1.AnnotationFence: fenceOf(n)}
	f.g.Expect(asA.Create(f.ctx, web)).To(Succeed())
	f.g.Expect(f.guarded("web")).To(BeTrue(), "guarded by the time the create returns")
	free := f.deployment("free", nil)
	f.g.Expect(f.c.Create(f.ctx, free)).To(Succeed())
	f.g.Expect(f.guarded("free")).To(BeFalse())
	dry := f.deployment("dry", protectedBy)
	dry.Annotations = map[string]string{fencingv1alpha1.AnnotationFence: fenceOf(n)}
	f.g.Expect(asA.Create(f.ctx, dry, client.DryRunAll)).To(Succeed())
	f.g.Expect(f.guarded("dry")).To(BeFalse(), "a dry run changes nothing (sideEffects: NoneOnDryRun)")
	// With the operator up, the unguarded Deployment is scaled without the
	// webhook, the guarded one through it.
	f.g.Expect(f.scaleTo(f.user("mallory"), free, 2, "kubectl")).To(Succeed())
	f.g.Expect(f.scaleTo(asA, web, 2, fieldmanager.Format("autoscaler", n))).To(Succeed())

	f.g.Expect(op.Stop()).To(Succeed())
	f.g.Eventually(func() error { return f.scaleTo(asA, web, 3, fieldmanager.Format("autoscaler", n)) }).WithTimeout(timeout).
		Should(MatchError(ContainSubstring(`failed calling webhook "protected-scale.fencedlease.io"`)))
	f.g.Expect(f.scaleTo(f.user("mallory"), free, 4, "kubectl")).To(Succeed(), "an unprotected Deployment is scaled with the operator down")
	got := &appsv1.Deployment{}
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(free), got)).To(Succeed())
	f.g.Expect(*got.Spec.Replicas).To(BeEquivalentTo(4))
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(web), got)).To(Succeed())
	f.g.Expect(*got.Spec.Replicas).To(BeEquivalentTo(2), "the protected one was not scaled with the operator down")
}

// TestScaleGuardResync: a protecting write names an object the guard lost
// again at once; the resync, run as the operator with the RBAC the installs
// give it, guards a labelled object that the guard lost (a reset, an object
// protected before the guard existed), and lets go of a deleted object's
// name only once it has been seen gone for the grace.
func TestScaleGuardResync(t *testing.T) {
	f := newFixture(t)
	f.startOperator(testenv.ManagerOptions{})
	_, _, n, asA, _ := f.holderAndStandby()
	web := f.deployment("web", map[string]string{fencingv1alpha1.LabelProtectedBy: "db"})
	web.Annotations = map[string]string{fencingv1alpha1.AnnotationFence: fenceOf(n)}
	f.g.Expect(asA.Create(f.ctx, web)).To(Succeed())
	f.g.Expect(f.guarded("web")).To(BeTrue())

	// The guard loses the name (a reset, or a resync that let it go); the
	// next protecting write names it again at once: the webhook reads the
	// role from the API server, not from a cache that may still show it.
	f.unguard("web")
	f.g.Expect(f.c.Get(f.ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
	web.Spec.Replicas = ptr.To[int32](2)
	f.g.Expect(asA.Update(f.ctx, web)).To(Succeed())
	f.g.Expect(f.guarded("web")).To(BeTrue(), "the holder's next write names it again")
	f.unguard("web")

	c, err := client.New(operatorConfig, client.Options{Scheme: setup.Scheme()})
	f.g.Expect(err).NotTo(HaveOccurred())
	hc, err := rest.HTTPClientFor(operatorConfig)
	f.g.Expect(err).NotTo(HaveOccurred())
	mapper, err := apiutil.NewDynamicRESTMapper(operatorConfig, hc)
	f.g.Expect(err).NotTo(HaveOccurred())
	r := &scaleguard.Resync{Guard: testenv.ScaleGuard, Client: c, Reader: c, Mapper: mapper, Grace: time.Nanosecond,
		Scaled: func(context.Context) []schema.GroupResource { return []schema.GroupResource{deployments} }}
	f.g.Expect(r.Once(f.ctx)).To(Succeed())
	f.g.Expect(f.guarded("web")).To(BeTrue(), "the resync guards the labelled Deployment again")

	f.g.Expect(asA.Delete(f.ctx, web)).To(Succeed())
	f.g.Expect(r.Once(f.ctx)).To(Succeed())
	f.g.Expect(f.guarded("web")).To(BeTrue(), "a name is kept at the first resync that sees its object gone")
	f.g.Expect(r.Once(f.ctx)).To(Succeed())
	f.g.Expect(f.guarded("web")).To(BeFalse(), "and let go once it has been gone for the grace")
}

// unguard takes the Deployment's name out of the scale guard, as a reset
// would.
func (f *fixture) unguard(name string) {
	role := &rbacv1.ClusterRole{}
	f.g.Expect(f.c.Get(f.ctx, types.NamespacedName{Name: testenv.ScaleGuard.Role}, role)).To(Succeed())
	role.Rules, _ = scaleguard.Apply(role.Rules, nil, []scaleguard.Key{{Resource: scaleguard.Resource(deployments, f.ns), Name: name}})
	f.g.Expect(f.c.Update(f.ctx, role)).To(Succeed())
	f.g.Expect(f.guarded(name)).To(BeFalse())
}
