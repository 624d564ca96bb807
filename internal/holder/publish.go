package holder

import (
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Roles a pod is published with, as in the API.
const (
	RoleHolder  = fencingv1alpha1.RoleHolder
	RoleStandby = fencingv1alpha1.RoleStandby
)

// Publication is what the operator reads of one pod's fencedlease.io/ label
// and annotations.
type Publication struct {
	UID types.UID
	// Labelled says that the pod carries the label fencedlease.io/lease with
	// the name of this FencedLease.
	Labelled bool
	// Lease, Role and Fence are the annotations the token files come from.
	// Fence is 0 when empty and -1 when it does not parse.
	Lease string
	Role  string
	Fence int64
	// Grant is the fence of the grant the pod was last marked for.
	Grant int64
	// Foreign says that the pod's annotations, its token files, name
	// another FencedLease.
	Foreign bool
}

// PublicationOf is what a pod of that UID carries of a FencedLease, as
// the record codec reads it.
func PublicationOf(uid types.UID, p record.Pod) Publication {
	return Publication{UID: uid, Labelled: p.Labelled, Lease: p.Lease, Role: p.Role, Fence: p.Fence, Grant: p.Grant, Foreign: p.Foreign}
}

// IsHolder says whether the pod is published as holder: role holder with a
// fence.
func (p Publication) IsHolder() bool { return p.Role == RoleHolder && p.Fence != 0 }

// IsStandby says whether the pod is published as a standby of the lease.
func (p Publication) IsStandby(lease string) bool {
	return p.Labelled && p.Lease == lease && p.Role == RoleStandby && p.Fence == 0
}

// Bare says whether the pod carries nothing of the lease.
func (p Publication) Bare() bool {
	return !p.Labelled && p.Lease == "" && p.Role == "" && p.Fence == 0 && p.Grant == 0
}

// PodAction is a write to one pod's label and annotations.
type PodAction string

// Pod actions.
const (
	// Leave writes nothing.
	Leave PodAction = "Leave"
	// Label adds the label and nothing else (the Lease already names this
	// pod; its role is published once the grant is committed and recorded).
	Label PodAction = "Label"
	// Standby labels the pod and publishes it as a standby: role standby,
	// empty fence.
	Standby PodAction = "Standby"
	// Clear removes the label and every annotation of the lease.
	Clear PodAction = "Clear"
)

// Ended says whether the grant of the given fence, published to the pod uid,
// is over according to the Lease as read: the Lease has committed a newer
// grant, or it no longer holds this one (revoked, or superseded by a pending
// grant). A fence newer than the Lease's means that the Lease as read lags
// behind: nothing is known to have ended.
func Ended(l Lease, uid types.UID, fence int64) bool {
	switch {
	case fence < l.Fence:
		return true
	case fence > l.Fence:
		return false
	}
	return l.State != StateHeld || l.HolderUID != uid
}

// CachedPodAction decides the write to a pod from the informer caches, on
// every reconcile. candidate says that the FencedLease selects the pod and no
// other FencedLease does; current that the Lease, as read, names the pod in
// a committed grant.
//
// It never publishes a holder (that takes the live protocol of the
// controller's publish step) and never demotes a holder whose grant the Lease
// as read has not ended: a cache that lags behind must not demote the holder
// of a newer grant.
func CachedPodAction(p Publication, lease string, candidate, current bool, l Lease) PodAction {
	if p.IsHolder() && !Ended(l, p.UID, p.Fence) {
		return Leave
	}
	switch {
	case !candidate && p.Bare():
		return Leave
	case !candidate:
		return Clear
	case p.IsHolder():
		return Standby
	case current && p.Foreign:
		// Its token files are another FencedLease's publication, which the
		// write checks has ended (or whose Lease is gone). The label alone
		// would leave that publication on a pod the other FencedLease no
		// longer finds by its label: nothing of the other's clears it, and
		// until this one's next write to the pod (its publication, which
		// may fail and wait) the pod stays published as the other one's
		// holder, beside the holders of its later grants. A standby's
		// annotations replace it.
		return Standby
	case current && !p.Labelled:
		return Label
	case current:
		return Leave
	case p.IsStandby(lease):
		return Leave
	}
	return Standby
}

// MarkAction decides the write to a pod that the API server lists with the
// lease's label, before the holder of the grant with fence grant is
// published (and after the caller has checked that no pod holds a newer
// grant): every other candidate is marked with the grant as a standby,
// every pod that is no longer a candidate is cleared. Each of these writes
// changes the pod's resourceVersion, which makes any publication of an older
// grant that is still in flight fail its optimistic lock.
func MarkAction(p Publication, lease string, candidate bool, grant int64) PodAction {
	switch {
	case !candidate:
		return Clear
	case p.IsStandby(lease) && p.Grant == grant:
		return Leave
	}
	return Standby
}
