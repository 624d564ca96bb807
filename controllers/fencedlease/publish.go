package fencedlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/holder"
	"github.com/fencedlease/fencedlease/internal/record"
)

// all returns every pod of the FencedLease the reconcile knows, selected ones
// first.
func (p *pods) all() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(p.selected)+len(p.stray))
	for i := range p.selected {
		out = append(out, &p.selected[i])
	}
	for i := range p.stray {
		out = append(out, &p.stray[i])
	}
	return out
}

// publicationOf reads a pod's label and annotations for the FencedLease
// (record.ParsePod): a pod whose label and lease annotation name another
// FencedLease (or none) carries nothing of this one.
func publicationOf(meta metav1.Object, lease string) holder.Publication {
	return holder.PublicationOf(meta.GetUID(), record.ParsePod(meta.GetLabels(), meta.GetAnnotations(), lease))
}

// reconcilePods brings the pods in line with the grant, from the caches:
// new candidates become standbys, the holder of a grant that the Lease has
// ended becomes a standby, pods that are no longer candidates are cleared.
// Then, once the status records the committed grant, its holder is published
// through the live protocol of publishHolder.
func (r *Reconciler) reconcilePods(ctx context.Context, s *scope) (ctrl.Result, error) {
	view := holder.LeaseOf(s.lease)
	// A standby is marked with the committed grant the Lease holds, if it
	// holds one: that grant was written before the Lease was read, so the
	// mark is what step 3 of the grant's publication would write, and that
	// step leaves the pod alone (design.md, "Publishing").
	mark := int64(0)
	if view.State == holder.StateHeld {
		mark = view.Fence
	}
	var errs, conditions []error
	for _, pod := range s.pods.all() {
		current := view.State == holder.StateHeld && pod.UID == view.HolderUID
		action := holder.CachedPodAction(publicationOf(pod, s.fl.Name), s.fl.Name, s.pods.candidate(pod.UID), current, view)
		// The action was decided on the pod as cached: it applies to that
		// version only, never to a newer one the cache has not seen.
		if err := r.writePod(ctx, s.fl, pod, action, mark, pod.ResourceVersion); errors.Is(err, errHeldElsewhere) {
			continue // the other FencedLease lets it go first
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		// Every pass, whatever it wrote: a condition write that failed
		// once (a conflict with the kubelet, a lost reply, a crash after
		// the pod write) is made again here.
		if err := r.syncHolderCondition(ctx, pod, holderConditionWanted(pod, s.fl.Name, view)); err != nil {
			conditions = append(conditions, err)
		}
	}
	if target, fence := publishable(s); target != nil && len(errs) == 0 && !s.mem.publishedLately(target, fence) {
		if err := r.publishHolder(ctx, s, target, fence, false); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{}, podErrors(ctx, s, append(errs, conditions...))
}

// recordAndPublish writes the status planned by the reconcile and, once
// it records the grant this reconcile committed, publishes that grant: the
// publication then needs no second reconcile, which would wait for the
// caches to show the status and the Lease that this one just wrote. The
// Lease as committed is as fresh as a read, so step 1 of publishHolder is
// skipped; step 4 is not. Anything that stops the publication here (a pod
// changed, a label not cached yet, another grant) is left to the next
// reconcile, which the grant asked for.
//
// The publication's reads (the list of the labelled pods and the Lease,
// or the Lease alone for a first grant) run beside the status patch: they
// read what neither the patch nor its outcome changes, and the holder is
// still published only once the patch has succeeded. Nothing orders a
// read of the publication after the status patch; each step's argument
// orders it before the holder's write only (docs/design.md, "The status
// patch runs beside the publication's reads"). A takeover publishes its
// new holder one round trip sooner.
func (r *Reconciler) recordAndPublish(ctx context.Context, s *scope, publish bool) error {
	write := r.planStatus(ctx, s.base, s, publish)
	var pub *publication
	if publish {
		pub = r.committedPublication(s)
	}
	recorded, requeue := !write, false
	var err error
	var steps []func(context.Context)
	fl := s.fl
	if write {
		// The patch decodes the stored FencedLease into a copy: the
		// publication's reads use the scope's at the same time.
		fl = s.fl.DeepCopy()
		steps = append(steps, func(ctx context.Context) { recorded, requeue, err = r.writeStatus(ctx, s.mem, s.base, fl) })
	}
	if pub != nil {
		steps = append(steps, pub.reads(r)...)
	}
	r.concurrently(ctx, steps...)
	if recorded {
		s.fl = fl
	}
	if requeue {
		s.found(lookAgain)
	}
	if pub == nil || !recorded || requeue || err != nil {
		return err
	}
	if perr := pub.write(ctx, r); perr != nil {
		ctrl.LoggerFrom(ctx).V(4).Info("Publishing the new grant on the next look", "holder", pub.target.Name, "fence", pub.fence, "err", perr.Error())
	}
	return nil
}

// committedPublication is the publication of the grant this reconcile
// committed, to be made once the status records it, or nil.
func (r *Reconciler) committedPublication(s *scope) *publication {
	if !s.outcome.granted || s.next == stale || s.pods == nil {
		return nil
	}
	s.recorded = *s.fl.Status.DeepCopy()
	target, fence := publishable(s)
	if target == nil {
		return nil
	}
	return newPublication(s, target, fence, true)
}

// errLookAgain marks a publication that must wait for the caches to catch
// up: the grant moved on, or its pod does not carry the lease's label yet.
var errLookAgain = errors.New("looking again soon")

// podErrors is the outcome of the pod writes of a reconcile. A pod that
// changed under a write (a conflict: the kubelet, another controller or
// another replica wrote it after the read) and a publication that must wait
// are the protocol at work, not failures: the FencedLease is looked at again
// soon, with the status still recorded. Anything else is an error.
func podErrors(ctx context.Context, s *scope, errs []error) error {
	var failed []error
	for _, err := range errs {
		if !apierrors.IsConflict(err) && !errors.Is(err, errLookAgain) {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("publish to the pods of FencedLease %s: %w", klog.KObj(s.fl), kerrors.NewAggregate(failed))
	}
	if len(errs) > 0 {
		ctrl.LoggerFrom(ctx).V(4).Info("A pod or the Lease changed under the pod writes; looking again", "err", kerrors.NewAggregate(errs).Error())
		s.found(lookAgain)
	}
	return nil
}

// publishable returns the holder pod and fence that may be published: the
// Lease holds a committed grant, the status as read already records it (the
// fencing webhook decides on the status, so the token must not reach the pod
// before it), and the holder is still eligible.
func publishable(s *scope) (*corev1.Pod, int64) {
	v := holder.LeaseOf(s.lease)
	h := s.recorded.Holder
	if v.State != holder.StateHeld || v.Fence <= 0 || h == nil || h.PodUID != v.HolderUID || s.recorded.Fence != v.Fence {
		return nil, 0
	}
	if c, ok := holder.Find(s.pods.candidates, v.HolderUID); !ok || !c.Eligible() {
		return nil, 0
	}
	for i := range s.pods.selected {
		if pod := &s.pods.selected[i]; pod.UID == v.HolderUID {
			if p := publicationOf(pod, s.fl.Name); p.IsHolder() && p.Fence == v.Fence && p.Labelled {
				return nil, 0 // published already
			}
			return pod, v.Fence
		}
	}
	return nil, 0
}

// publishHolder hands the fence of the committed grant to its holder pod.
// A read-then-write across two objects (the Lease, then the pod) is not
// atomic, so the pod write is tied to the grant instead:
//
//  1. the Lease is read from the API server: the grant must be current (this
//     spares the pods a pointless marking by a replica that lags);
//  2. the pods that carry the lease's label are listed from the API server,
//     at the same time as step 1;
//  3. every one of them but the holder is marked with this grant as a
//     standby, and every one that is no longer a candidate is cleared: each
//     write changes that pod's resourceVersion, and is made on the version
//     listed (a pod that changed since, published by another replica say,
//     makes this publication start over);
//  4. the Lease is read from the API server again: the grant must still be
//     current (step 1's read stands for it when step 3 wrote nothing,
//     earlyConfirm);
//  5. the holder is published with an optimistic lock on the
//     resourceVersion it had in step 2.
//
// A publication of an older grant that is still in flight (a paused replica
// between its steps 4 and 5) holds a resourceVersion from before our step 3,
// which changed every labelled pod, so its write fails. Our own step 5 fails
// the same way if a newer grant's step 3 came first. Hence no two pods are
// ever published as holder at once, and published fences only grow.
func (r *Reconciler) publishHolder(ctx context.Context, s *scope, target *corev1.Pod, fence int64, committed bool) error {
	pub := newPublication(s, target, fence, committed)
	r.concurrently(ctx, pub.reads(r)...)
	return pub.write(ctx, r)
}

// publication is one publication of a grant to its holder pod: its reads,
// which may run beside other steps of the reconcile, then its writes.
type publication struct {
	s      *scope
	target *corev1.Pod
	fence  int64
	// first is set for a FencedLease's first grant, published by the
	// reconcile that committed it without steps 2 and 3 (publishFirst).
	first bool
	// list is step 2's list, confirmErr step 1's outcome (step 4's
	// alone for a first grant).
	list                *metav1.PartialObjectMetadataList
	listErr, confirmErr error
}

func newPublication(s *scope, target *corev1.Pod, fence int64, committed bool) *publication {
	return &publication{s: s, target: target, fence: fence, first: committed && s.created && !otherHolder(s, target.UID)}
}

// reads are the publication's reads, each a step of its own: steps 1 and
// 2 at once (the Lease read is step 1, and counts as step 4 when step 3
// writes nothing, earlyConfirm), or for a first grant step 4.
func (p *publication) reads(r *Reconciler) []func(context.Context) {
	confirm := func(ctx context.Context) { p.confirmErr = r.confirmGrant(ctx, p.s, p.target.UID, p.fence) }
	if p.first {
		return []func(context.Context){confirm}
	}
	p.list = &metav1.PartialObjectMetadataList{}
	p.list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	list := func(ctx context.Context) {
		p.listErr = r.APIReader.List(ctx, p.list, client.InNamespace(p.s.fl.Namespace), client.MatchingLabels{fencingv1alpha1.LabelLease: p.s.fl.Name})
	}
	return []func(context.Context){list, confirm}
}

// write carries out the rest of the publication once its reads are done.
func (p *publication) write(ctx context.Context, r *Reconciler) error {
	s, target, fence := p.s, p.target, p.fence
	if p.confirmErr != nil {
		return p.confirmErr
	}
	if p.first {
		return r.publishFirst(ctx, s, target, fence)
	}
	if p.listErr != nil {
		return fmt.Errorf("list the pods of FencedLease %s before publishing: %w", klog.KObj(s.fl), p.listErr)
	}
	list := p.list
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	var live *metav1.PartialObjectMetadata
	for i := range list.Items {
		if listed := publicationOf(&list.Items[i], s.fl.Name); listed.IsHolder() && listed.Fence > fence {
			// A newer grant is published already: ours is not current.
			s.found(stale)
			return fmt.Errorf("pod %s holds fence %d, newer than fence %d: %w", list.Items[i].Name, listed.Fence, fence, errLookAgain)
		}
	}
	marked := false
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.UID == target.UID {
			live = pod
			continue
		}
		action := holder.MarkAction(publicationOf(pod, s.fl.Name), s.fl.Name, s.pods.candidate(pod.UID), fence)
		if err := r.writePodMeta(ctx, s.fl, pod, action, fence); err != nil {
			return err
		}
		marked = marked || action != holder.Leave
	}
	if live == nil {
		return fmt.Errorf("pod %s does not carry the label %s=%s yet; publishing fence %d later: %w", klog.KObj(target), fencingv1alpha1.LabelLease, s.fl.Name, fence, errLookAgain)
	}
	return r.publishOn(ctx, s, target, live, fence, earlyConfirm(marked, publicationOf(live, s.fl.Name), fence))
}

// earlyConfirm says whether the Lease read beside the list (step 1) also
// stands for step 4, so that the holder is published without reading the
// Lease again: step 3 wrote nothing, and the holder as listed carries
// nothing of this grant or of a newer one (a mark, a fence). The read then
// came before the list or after it. After it, the order is the one above.
// Before it, the grant may have ended between the two: a newer grant, or
// its revocation. Either marks the holder, this pod, with the fence of the
// grant it ended or a newer one (the demotion of the old holder, or step 3
// of the newer grant's publication, which comes before anyone else is
// published). A mark that came before the list is seen in it, and the
// Lease is read again (and found moved on); one that came after the list
// makes the publication fail its optimistic lock, or follows it and
// demotes the pod, as when the grant ends after step 4. An end whose
// demotion failed leaves the pod as the sequential order can leave it
// too, published on a grant that ended after the read. Every other
// labelled pod already carries this grant's mark, written after the
// grant, so an older publication still in flight fails its lock on them as
// it would on step 3's marks (docs/design.md, "The list and the Lease read
// at once"). The simulation found the revocation (seed 153): with the
// pod's mark of this very grant accepted, a pod demoted by a revocation
// was published again.
func earlyConfirm(marked bool, listed holder.Publication, fence int64) bool {
	return !marked && listed.Grant < fence && listed.Fence < fence
}

// publishOn carries out steps 4 and 5 of a publication: the grant must
// still be current, then the holder is published on the version of the pod
// that on carries (the pod as listed, or target itself), unless it is
// published already. target is then updated to that write.
func (r *Reconciler) publishOn(ctx context.Context, s *scope, target *corev1.Pod, on client.Object, fence int64, confirmed bool) error {
	if p := publicationOf(on, s.fl.Name); p.IsHolder() && p.Fence == fence {
		return nil // published already; the cache had not seen it
	}
	if err := r.heldElsewhere(ctx, s.fl, on); err != nil {
		return err
	}
	if !confirmed {
		if err := r.confirmGrant(ctx, s, target.UID, fence); err != nil {
			return err
		}
	}
	if err := r.Patch(ctx, on, publicationPatch(holderAction, s.fl.Name, fence, on.GetResourceVersion())); err != nil {
		return fmt.Errorf("publish fence %d to pod %s: %w", fence, klog.KObj(target), err)
	}
	s.mem.published = ownPublication{uid: target.UID, fence: fence, rv: on.GetResourceVersion()}
	ctrl.LoggerFrom(ctx).Info("Published fence to holder", "lease", klog.KObj(s.fl), "holder", target.Name, "fence", fence, "transition", fencingv1alpha1.EventHolderGranted)
	r.podEvent(target, s.fl, eventNormal, fencingv1alpha1.EventHolderGranted, "Publish", "Holds FencedLease %s with fence %d", s.fl.Name, fence)
	// The condition is written on the version the publication made: it
	// fails if the pod changed since (demoted by a newer grant's
	// publication, say), and the next pass looks again.
	target.ResourceVersion = on.GetResourceVersion()
	target.Annotations = on.GetAnnotations()
	return r.syncHolderCondition(ctx, target, holderConditionWanted(target, s.fl.Name, holder.LeaseOf(s.lease)))
}

// publishFirst publishes a FencedLease's first grant from the reconcile
// that created its Lease with it and committed it, without steps 2 and 3 of
// publishHolder. Listing the labelled pods costs the API server a pass over
// every pod of the namespace (it has no index on labels): at 20,000 pods
// that was half its time in a cold start. Those steps guard against a
// publication of an older grant still in flight, and against a pod still
// published with one; here there is none:
//
//   - The Lease has no older grant: it did not exist until this reconcile
//     created it, and the commit was a compare-and-swap on that creation.
//   - No older grant of this FencedLease was ever published: a grant is
//     published only once the status records it, the status never goes
//     back, and the status this reconcile read recorded no grant. That read
//     was current: the status patch that recorded this grant, which runs
//     before this, carried its resourceVersion and succeeded. A Lease of an
//     earlier grant that was deleted since changes none of that.
//   - A FencedLease of the same name deleted before had its pods cleared,
//     once its grant was over, on the pods the API server listed
//     (clearPods): that cleared its holder, and made any publication of it
//     still in flight fail its optimistic lock.
//
// So the holder is published on the version of the pod this reconcile read
// or wrote (a pod changed since makes the write fail, and the next
// reconcile publishes the usual way), after step 4: the grant must still
// be current. Should the caches show another pod published for the
// FencedLease all the same (its finalizer removed by hand, say), the
// publication goes the usual way.
func (r *Reconciler) publishFirst(ctx context.Context, s *scope, target *corev1.Pod, fence int64) error {
	if !publicationOf(target, s.fl.Name).Labelled {
		return fmt.Errorf("pod %s does not carry the label %s=%s yet; publishing fence %d later: %w", klog.KObj(target), fencingv1alpha1.LabelLease, s.fl.Name, fence, errLookAgain)
	}
	return r.publishOn(ctx, s, target, target, fence, true)
}

// ownPublication is a publication this process wrote: the pod, the fence,
// and the pod's resourceVersion the write made.
type ownPublication struct {
	uid   types.UID
	fence int64
	rv    string
}

// publishedLately says whether this process published fence to the pod
// itself and the pod as cached is older than that write: the cache has not
// caught up with it yet. The reconcile that follows every grant a
// millisecond later would otherwise find the publication missing, and
// publish the usual way, with a list of the namespace's pods on the API
// server only to find it done. A pod changed since the write (demoted by a
// newer grant's publication, say) is newer in the cache than the write,
// and is looked at as usual; so is every pod while the pod cache may be
// ahead of a store that went back in time, and a write from before the
// store went back is forgotten (regression.go).
func (mem *memory) publishedLately(pod *corev1.Pod, fence int64) bool {
	p := mem.published
	if mem.isAhead(podCache) || p.uid != pod.UID || p.fence != fence || p.rv == "" {
		return false
	}
	return record.Newer(p.rv, pod.ResourceVersion)
}

// otherHolder says whether a pod of the FencedLease other than the one with
// uid is published as its holder, as the caches show the pods.
func otherHolder(s *scope, uid types.UID) bool {
	for _, pod := range s.pods.all() {
		if pod.UID != uid && publicationOf(pod, s.fl.Name).IsHolder() {
			return true
		}
	}
	return false
}

// confirmGrant reads the Lease from the API server and checks that the grant
// is still current.
func (r *Reconciler) confirmGrant(ctx context.Context, s *scope, uid types.UID, fence int64) error {
	live := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.lease), live); err != nil {
		return fmt.Errorf("confirm Lease %s before publishing: %w", klog.KObj(s.lease), err)
	}
	if v := holder.LeaseOf(live); v.State != holder.StateHeld || v.HolderUID != uid || v.Fence != fence {
		s.found(stale)
		return fmt.Errorf("lease %s moved on before fence %d was published: %w", klog.KObj(live), fence, errLookAgain)
	}
	return nil
}

// holderAction is the publication of the holder, as a pod action.
const holderAction holder.PodAction = "Holder"

// writePod carries out an action on a pod. With a resourceVersion, the
// write applies to that version of the pod only. On success pod is the pod as
// the API server stored it.
func (r *Reconciler) writePod(ctx context.Context, fl *fencingv1alpha1.FencedLease, pod *corev1.Pod, action holder.PodAction, grant int64, resourceVersion string) error {
	if action == holder.Leave {
		return nil
	}
	if err := r.heldElsewhere(ctx, fl, pod); err != nil {
		return err
	}
	if err := client.IgnoreNotFound(r.Patch(ctx, pod, publicationPatch(action, fl.Name, grant, resourceVersion))); err != nil {
		return fmt.Errorf("%s pod %s for FencedLease %s: %w", action, klog.KObj(pod), fl.Name, err)
	}
	return nil
}

// writePodMeta carries out an action on a pod listed from the API server as
// metadata, on the version listed only: if the pod changed since (another
// replica published it, say), the write fails and the publication starts
// over from a fresh list. The holder condition follows on the next
// reconcile.
func (r *Reconciler) writePodMeta(ctx context.Context, fl *fencingv1alpha1.FencedLease, pod *metav1.PartialObjectMetadata, action holder.PodAction, grant int64) error {
	if action == holder.Leave {
		return nil
	}
	if err := r.heldElsewhere(ctx, fl, pod); err != nil {
		return err
	}
	if err := client.IgnoreNotFound(r.Patch(ctx, pod, publicationPatch(action, fl.Name, grant, pod.ResourceVersion))); err != nil {
		return fmt.Errorf("%s pod %s for FencedLease %s: %w", action, klog.KObj(pod), fl.Name, err)
	}
	return nil
}

// errHeldElsewhere marks a pod write left undone: the pod is published as
// the holder of another FencedLease.
var errHeldElsewhere = errors.New("published as the holder of another FencedLease")

// heldElsewhere returns an error (errHeldElsewhere, and errLookAgain) when
// the pod is published as the holder of another FencedLease whose grant the
// cache does not show ended: no FencedLease writes over that publication.
// A pod's labels can move it from one FencedLease to another between two
// looks of the first; were the second to publish the pod as its standby, or
// its holder, the pod would lose the first one's fence while that grant
// still holds, and the first, seeing the pod selected again, would publish
// the same fence to it once more: authority re-acquired silently for the
// same grant (design.md, invariant 5). The first FencedLease ends its grant
// once it sees the pod no longer selected, and clears the pod; the pod's
// change brings the second back.
func (r *Reconciler) heldElsewhere(ctx context.Context, fl *fencingv1alpha1.FencedLease, pod metav1.Object) error {
	lease, fence := record.Published(pod.GetAnnotations())
	if lease == "" || lease == fl.Name || fence <= 0 {
		return nil
	}
	l, key := &coordinationv1.Lease{}, types.NamespacedName{Namespace: fl.Namespace, Name: lease}
	err := r.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		// Gone, or not in the cache yet: the API server tells. A Lease
		// whose grant may be in use is never gone (its finalizer).
		err = r.APIReader.Get(ctx, key, l)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read Lease %s/%s of pod %s: %w", fl.Namespace, lease, pod.GetName(), err)
	case holder.Ended(holder.LeaseOf(l), pod.GetUID(), fence):
		return nil
	}
	return fmt.Errorf("pod %s/%s holds FencedLease %s with fence %d: %w (%w)", fl.Namespace, pod.GetName(), lease, fence, errHeldElsewhere, errLookAgain)
}

// publicationPatch is a JSON merge patch that sets every label and annotation
// of the lease on a pod to what the action says, whatever the pod carries
// now: a patch computed as a difference from a cached copy would leave alone
// what the copy did not show. grant, when not 0, marks the pod with that
// grant (and is the fence of a holder). With a resourceVersion the patch
// applies to that version only.
func publicationPatch(action holder.PodAction, lease string, grant int64, resourceVersion string) client.Patch {
	var md map[string]any
	switch action {
	case holder.Label:
		md = record.PodMergePatch(lease, true, nil)
	case holder.Standby, holderAction:
		p := record.Pod{Lease: lease, Role: holder.RoleStandby, Grant: grant}
		if action == holderAction {
			p.Role, p.Fence = holder.RoleHolder, grant
		}
		md = record.PodMergePatch(lease, true, &p)
	case holder.Clear:
		md = record.PodMergePatch(lease, false, nil)
	default: // holder.Leave: nothing is written
		md = map[string]any{}
	}
	if resourceVersion != "" {
		md["resourceVersion"] = resourceVersion
	}
	data, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		panic(err) // maps of strings always marshal
	}
	return client.RawPatch(types.MergePatchType, data)
}

// holderConditionWanted says whether the fencedlease.io/holder condition of
// a pod, as read, should be True: the pod is published as the holder of the
// grant that the Lease, as read, holds. Anything else is a standby, a pod
// whose grant ended, or no candidate at all. A pod being deleted is never
// made the holder here, and a former holder that is terminating is set
// False: it would stay Ready for its whole grace period while another pod
// holds.
func holderConditionWanted(pod *corev1.Pod, lease string, v holder.Lease) bool {
	p := publicationOf(pod, lease)
	return pod.DeletionTimestamp == nil && p.Labelled && p.IsHolder() &&
		v.State == holder.StateHeld && v.HolderUID == pod.UID && v.Fence > 0 && p.Fence == v.Fence
}

// syncHolderCondition keeps the fencedlease.io/holder condition of a pod that
// carries the readiness gate as holderConditionWanted says, so that only the
// holder is Ready. It is a strategic merge patch of that one condition (the
// conditions merge by type): the kubelet's own conditions, which the cached
// copy may show as they were, are left as the API server has them. The patch
// carries the resourceVersion of the pod the decision was made on, so it
// never applies to a version whose publication the decision did not see.
func (r *Reconciler) syncHolderCondition(ctx context.Context, pod *corev1.Pod, isHolder bool) error {
	if !hasReadinessGate(pod) {
		return nil
	}
	status, reason, msg := corev1.ConditionFalse, "Standby", "this pod does not hold the lease"
	if isHolder {
		status, reason, msg = corev1.ConditionTrue, "Holder", "this pod holds the lease"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == fencingv1alpha1.ConditionHolder && c.Status == status {
			return nil
		}
	}
	cond := corev1.PodCondition{Type: fencingv1alpha1.ConditionHolder, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(r.Clock.Now())}
	if err := client.IgnoreNotFound(r.Status().Patch(ctx, pod, conditionPatch(cond, pod.ResourceVersion))); err != nil {
		return fmt.Errorf("set condition %s=%s on pod %s: %w", cond.Type, status, klog.KObj(pod), err)
	}
	return nil
}

// conditionPatch is a strategic merge patch of one pod condition, on the
// pod's version resourceVersion only.
func conditionPatch(cond corev1.PodCondition, resourceVersion string) client.Patch {
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"status":   map[string]any{"conditions": []corev1.PodCondition{cond}},
	})
	if err != nil {
		panic(err) // a condition always marshals
	}
	return client.RawPatch(types.StrategicMergePatchType, data)
}

func hasReadinessGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == fencingv1alpha1.ConditionHolder {
			return true
		}
	}
	return false
}
