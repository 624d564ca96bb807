package policy

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Operations of a Request, as admission names them.
const (
	Create = "CREATE"
	Update = "UPDATE"
	Delete = "DELETE"
)

// Resources of a Request that the operator-state policy matches.
const (
	Pods               = "pods"
	PodsStatus         = "pods/status"
	Leases             = "leases"
	FencedLeasesStatus = "fencedleases/status"
)

// Principals are the callers the policy knows by name: as config/policy
// renders them from the install (operatorUsers, breakGlassUsers,
// breakGlassGroups).
type Principals struct {
	OperatorUsers    []string
	BreakGlassUsers  []string
	BreakGlassGroups []string
}

// Request is a write that the operator-state policy judges. Old is nil on
// a CREATE, New on a DELETE. For Leases they are *coordinationv1.Lease; for
// anything else only their metadata counts.
type Request struct {
	Resource  string
	Operation string
	User      string
	Groups    []string
	// PodUID is the pod a bound service-account token names, if any.
	PodUID   string
	Old, New metav1.Object
}

// cleanupUsers are the system controllers that delete what a deleted owner
// or namespace leaves.
var cleanupUsers = []string{
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:serviceaccount:kube-system:namespace-controller",
	"system:kube-controller-manager",
}

// Allows says whether the operator-state ValidatingAdmissionPolicy of
// config/policy admits a request. It is a statement of that policy in Go, for
// the deterministic simulation (internal/sim), whose actors other than the
// operator (the holder processes, a namespace editor) write through it: the
// API server evaluates the CEL of the policy itself. TestModelAgreesWithThePolicy
// holds the two together on a real API server.
func Allows(p Principals, r Request) bool {
	operator := slices.Contains(p.OperatorUsers, r.User)
	switch r.Resource {
	case Pods, PodsStatus:
		if r.Operation == Delete {
			return true
		}
		return operator || (len(changedAnnotations(r.Old, r.New)) == 0 && !labelChanged(r.Old, r.New, fencingv1alpha1.LabelLease) &&
			!labelChanged(r.Old, r.New, fencingv1alpha1.LabelShardSet))
	case FencedLeasesStatus:
		return r.Operation != Update || operator
	case Leases:
		return !ownedLease(r.Old, r.New) || operator || p.leaseWriteAllowed(r)
	}
	return true
}

// leaseWriteAllowed: the holder's own renewal and release, deletions by the
// cleanup controllers and break-glass principals, and the garbage
// collector's orphaning.
func (p Principals) leaseWriteAllowed(r Request) bool {
	breakGlass := slices.Contains(p.BreakGlassUsers, r.User)
	for _, g := range r.Groups {
		breakGlass = breakGlass || slices.Contains(p.BreakGlassGroups, g)
	}
	cleanup := slices.Contains(cleanupUsers, r.User)
	switch r.Operation {
	case Delete:
		return cleanup || breakGlass
	case Update:
		old, _ := r.Old.(*coordinationv1.Lease)
		l, _ := r.New.(*coordinationv1.Lease)
		if old == nil || l == nil {
			return false
		}
		if cleanup && ownershipOnly(old, l) {
			return true
		}
		return holderRenewal(old, l, r.PodUID) || holderRelease(old, l, r.PodUID)
	}
	return false
}

// holderWrite: the pod the Lease names, as itself, changes nothing of the
// grant but renewTime and the state annotation.
func holderWrite(old, l *coordinationv1.Lease, podUID string) bool {
	rec := record.ParseLease(old.Annotations)
	uid, state := rec.HolderUID, rec.State
	o, n := old.Spec, l.Spec
	return uid != "" && podUID == uid && (state == record.StateHeld || state == record.StateRevoked) &&
		reflect.DeepEqual(o.HolderIdentity, n.HolderIdentity) && reflect.DeepEqual(o.AcquireTime, n.AcquireTime) &&
		reflect.DeepEqual(o.LeaseDurationSeconds, n.LeaseDurationSeconds) && reflect.DeepEqual(o.LeaseTransitions, n.LeaseTransitions) &&
		reflect.DeepEqual(o.Strategy, n.Strategy) && reflect.DeepEqual(o.PreferredHolder, n.PreferredHolder) &&
		maps.Equal(old.Labels, l.Labels) && reflect.DeepEqual(nilIfEmpty(old.OwnerReferences), nilIfEmpty(l.OwnerReferences)) &&
		slices.Equal(old.Finalizers, l.Finalizers)
}

func holderRenewal(old, l *coordinationv1.Lease, podUID string) bool {
	return holderWrite(old, l, podUID) && maps.Equal(old.Annotations, l.Annotations) &&
		record.ParseLease(old.Annotations).State == record.StateHeld && record.ParseLease(old.Annotations).HolderRenews()
}

func holderRelease(old, l *coordinationv1.Lease, podUID string) bool {
	return holderWrite(old, l, podUID) && reflect.DeepEqual(old.Spec.RenewTime, l.Spec.RenewTime) &&
		slices.Equal(changedAnnotations(old, l), []string{record.LeaseState}) &&
		record.ParseLease(l.Annotations).State == record.StateReleased
}

// ownershipOnly: an update that changes nothing but owner references and
// finalizers (the garbage collector orphaning a dependent).
func ownershipOnly(old, l *coordinationv1.Lease) bool {
	return reflect.DeepEqual(old.Spec, l.Spec) && maps.Equal(old.Annotations, l.Annotations) && maps.Equal(old.Labels, l.Labels)
}

// ownedLease: a FencedLease or a FencedShardSet is among the Lease's
// owners, before or after.
func ownedLease(objs ...metav1.Object) bool {
	for _, o := range objs {
		if o == nil || reflect.ValueOf(o).IsNil() {
			continue
		}
		for _, ref := range o.GetOwnerReferences() {
			if (ref.Kind == "FencedLease" || ref.Kind == "FencedShardSet") && strings.HasPrefix(ref.APIVersion, fencingv1alpha1.GroupVersion.Group+"/") {
				return true
			}
		}
	}
	return false
}

// changedAnnotations are the fencedlease.io/ annotations a request sets,
// changes or removes, sorted.
func changedAnnotations(old, obj metav1.Object) []string {
	o, n := annotationsOf(old), annotationsOf(obj)
	var out []string
	for k, v := range n {
		if was, ok := o[k]; strings.HasPrefix(k, fencingv1alpha1.Prefix) && (!ok || was != v) {
			out = append(out, k)
		}
	}
	for k := range o {
		if _, ok := n[k]; strings.HasPrefix(k, fencingv1alpha1.Prefix) && !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// labelChanged: a request sets, changes or removes the label key.
func labelChanged(old, obj metav1.Object, key string) bool {
	o, had := labelsOf(old)[key]
	n, has := labelsOf(obj)[key]
	return had != has || o != n
}

func annotationsOf(o metav1.Object) map[string]string {
	if o == nil || reflect.ValueOf(o).IsNil() {
		return nil
	}
	return o.GetAnnotations()
}

func labelsOf(o metav1.Object) map[string]string {
	if o == nil || reflect.ValueOf(o).IsNil() {
		return nil
	}
	return o.GetLabels()
}

func nilIfEmpty(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return nil
	}
	return refs
}
