//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/coverage"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
)

// The status attack: every lease also protects a Service, whose status
// subresource the API server lets change the object's labels and
// annotations (as for most built-in resources). After a pause, a stale
// process tries, with this probability, one status write that removes the
// protected-by label or moves the stored fence to the largest int64, with
// its fence in the field manager; an impostor tries it too. Every such
// write must be refused, and every Service must end as it began.
const statusAttackChance = 0.5

func serviceOf(lease string) string { return lease + "-svc" }

// createServices lists Services (and all their subresources) in the fencing
// webhook's configuration, as webhooks.protectedResources would, and creates
// one protected Service per lease, as the break-glass user. The webhook
// configuration's change reaches every API server before the run starts: an
// unfenced status write by the administrator is refused first.
func (w *world) createServices(breakGlass client.Client) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := w.admin.Get(w.ctx, types.NamespacedName{Name: "fencedlease-fencing"}, cfg); err != nil {
			return err
		}
		cfg.Webhooks[0].Rules = append(cfg.Webhooks[0].Rules, coverage.Rules([]coverage.Entry{{Resources: []string{"services"}}})...)
		return w.admin.Update(w.ctx, cfg)
	})
	if err != nil {
		return fmt.Errorf("list services in the fencing webhook's configuration: %w", err)
	}
	for _, l := range w.leases {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: serviceOf(l.Name),
			Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: l.Name}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		// The webhook's own view of its configuration catches up a moment
		// after the API server's: until then it refuses the resource.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := breakGlass.Create(w.ctx, svc)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "decides writes to the resources its configuration lists") || time.Now().After(deadline) {
				return fmt.Errorf("create protected Service %s: %w", svc.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	probe := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: serviceOf(w.leases[0].Name)}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := w.admin.Status().Patch(w.ctx, probe, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"probe":"x"}}}`)))
		if err != nil {
			return nil // refused: the webhook decides Services' status writes
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("an unfenced status write of Service %s is still admitted 30s after Services were listed", probe.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// statusAttack sends one status write of the lease's Service that tries to
// change its metadata, with fence in the field manager, and records it.
func (p *process) statusAttack(ctx context.Context, fence int64, src Source) {
	change, patch := "unlabel", fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, fencingv1alpha1.LabelProtectedBy)
	if p.rng.IntN(2) == 0 {
		change, patch = "move-fence", fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, fencingv1alpha1.AnnotationFence, int64(math.MaxInt64))
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.w.ns, Name: serviceOf(p.lease.Name)}}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	err := p.c.Status().Patch(wctx, svc, client.RawPatch(types.MergePatchType, []byte(patch)),
		client.FieldOwner(fieldmanager.Format("worker", fence)))
	outcome, reason := Classify(err)
	p.w.rec.StatusAttempt(StatusAttempt{Process: p.name, Lease: p.lease.Name, Fence: fence, Source: src, Change: change, Outcome: outcome, Reason: reason})
}

// checkServices reads every protected Service at the end: each still
// carries its label and no stored fence (nothing ever wrote the object
// itself).
func (w *world) checkServices() []string {
	var out []string
	for _, l := range w.leases {
		svc := &corev1.Service{}
		if err := w.admin.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: serviceOf(l.Name)}, svc); err != nil {
			out = append(out, fmt.Sprintf("read Service %s: %v", serviceOf(l.Name), err))
			continue
		}
		if svc.Labels[fencingv1alpha1.LabelProtectedBy] != l.Name {
			out = append(out, fmt.Sprintf("Service %s lost its protected-by label to a status write", svc.Name))
		}
		if v, ok := svc.Annotations[fencingv1alpha1.AnnotationFence]; ok {
			out = append(out, fmt.Sprintf("Service %s got stored fence %q from a status write", svc.Name, v))
		}
	}
	return out
}
