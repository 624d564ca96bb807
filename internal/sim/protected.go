package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/internal/record"
)

// Protected objects: ConfigMaps that the FencedLeases protect, by name.
var protectedObjects = map[string][]string{"db": {"db-0", "db-1", "db-2"}, "other": {"other-0"}}

// request is one write of a workload's command to a protected object.
type request struct {
	pod string
	uid types.UID
	op  admissionv1.Operation
	// name is the ConfigMap's, lease the FencedLease that protects it.
	name, lease string
	// fence is the fence the write carries: its process's, or, for an
	// impostor, one read off the object.
	fence int64
	// believed is the fence the process believes it holds, 0 when none.
	believed int64
	// status makes the write a status subresource write, the fence in its
	// field manager, keeping the object's metadata changes as the API
	// server does for most built-in resources; meta is the change of
	// metadata it tries.
	status bool
	meta   metaChange
}

// metaChange is a change of a protected object's metadata that a
// subresource write tries: none, removing the protected-by label, or moving
// the stored fence far ahead (which would block the holder).
type metaChange int

const (
	metaNone metaChange = iota
	metaUnlabel
	metaMoveFence
)

func (r *request) String() string {
	sub := ""
	if r.status {
		sub = fmt.Sprintf(" status (metadata change %d)", r.meta)
	}
	return fmt.Sprintf("pod %s %s ConfigMap %s%s (fence %d, believes %d)", r.pod, r.op, r.name, sub, r.fence, r.believed)
}

// work lets the command of a process write a protected object, if it works
// now: with its fence while it believes it holds (or within its grace
// period), and now and then as an impostor, with the fence the object
// carries, while it holds nothing.
func (w *world) work(pod *corev1.Pod, p *proc) bool {
	s := w.sim
	if p.busy || len(s.hooks) == 0 {
		return false
	}
	r := &request{pod: pod.Name, uid: pod.UID}
	if lease, fence, ok := p.holds(w.now()); ok {
		r.lease, r.fence, r.believed = lease, fence, fence
	} else {
		if s.rng.Intn(20) != 0 {
			return false
		}
		r.lease = []string{"db", "other"}[s.rng.Intn(2)]
	}
	names := protectedObjects[r.lease]
	if len(names) == 0 {
		return false
	}
	r.name = names[s.rng.Intn(len(names))]
	switch n := s.rng.Intn(10); {
	case n < 6:
		r.op = admissionv1.Update
	case n < 8:
		r.op = admissionv1.Create
	default:
		r.op = admissionv1.Delete
	}
	if r.believed == 0 {
		// Anyone may read the object, and its fence.
		cm := &corev1.ConfigMap{}
		if s.store.get(s.store.rev, types.NamespacedName{Namespace: w.namespace, Name: r.name}, cm) == nil {
			r.fence = record.FenceOf(cm.Annotations[fencingv1alpha1.AnnotationFence])
		}
		if r.fence <= 0 {
			r.fence = 1
		}
		s.stats.ImpostorWrites++
	}
	if r.op == admissionv1.Update && s.rng.Intn(4) == 0 {
		// A status write, which keeps metadata changes on most built-in
		// resources: one in two tries to unprotect the object or move its
		// stored fence.
		r.status = true
		r.meta = metaChange(s.rng.Intn(4) % 3)
		s.stats.StatusWrites++
		if r.meta != metaNone {
			s.stats.MetadataChangingWrites++
		}
	}
	if r.op == admissionv1.Delete && r.believed > 0 && r.believed < s.checker.newestCommitted(r.lease) {
		s.stats.StaleDeletes++
	}
	p.busy = true
	s.startRequest(r, func() { p.busy = false })
	return true
}

// startRequest starts a request as a client actor: every API call of the
// API server's handling of it (its reads of the object, the webhook's live
// reads, the write) is a point where the scheduler may run anything else.
func (s *Sim) startRequest(r *request, done func()) {
	a := &actor{key: types.NamespacedName{Namespace: s.world.namespace, Name: "request " + r.String()}, calls: make(chan *call),
		done: make(chan struct{}), onDone: done}
	s.clients = append(s.clients, a)
	s.tracef("step %d: %s", s.step, r)
	ctx := withActor(a)
	go func() {
		defer close(a.done)
		s.handle(ctx, r)
	}()
	s.await(a)
}

// handle is the API server's handling of a protected write: read the object,
// call the fencing webhook (a replica the request happens to reach), and
// write it as a compare-and-swap on the version the webhook decided on. When
// the object changed in between, the whole is done again, webhook included,
// as the API server's update and delete do.
func (s *Sim) handle(ctx context.Context, r *request) {
	key := types.NamespacedName{Namespace: s.world.namespace, Name: r.name}
	for range 5 {
		var cur *corev1.ConfigMap
		var start int64
		if err := s.do(ctx, fmt.Sprintf("api server reads ConfigMap %s for pod %s", r.name, r.pod), false, func() error {
			start = s.store.rev
			cm := &corev1.ConfigMap{}
			if s.store.get(start, key, cm) == nil {
				cur = cm
			}
			return nil
		}); err != nil {
			return
		}
		if (r.op == admissionv1.Create) != (cur == nil) {
			return // AlreadyExists, NotFound
		}
		if r.status && cur.Labels[fencingv1alpha1.LabelProtectedBy] == "" {
			return // not sent to the webhook: its objectSelector
		}
		obj := r.object(cur, s.world.namespace)
		h := s.hooks[s.rng.Intn(len(s.hooks))]
		lagging := h.lags(s, r.lease)
		resp := h.handler.Handle(ctx, r.admission(cur, obj))
		if ctx.Err() != nil {
			return
		}
		s.checker.decided(s, r, start, resp.Allowed, lagging)
		if !resp.Allowed {
			s.tracef("  denied: %s", resp.Result.Message)
			return
		}
		conflict := false
		if err := s.do(ctx, fmt.Sprintf("api server writes ConfigMap %s for pod %s", r.name, r.pod), true, func() error {
			head := &corev1.ConfigMap{}
			found := s.store.get(s.store.rev, key, head) == nil
			if r.op != admissionv1.Create && (!found || head.ResourceVersion != cur.ResourceVersion) {
				conflict = found
				return apierrors.NewConflict(resourceOf("ConfigMap"), r.name, fmt.Errorf("the object changed since the webhook's decision"))
			}
			err := s.apply(r, cur, obj)
			if err == nil {
				k := objKey{kind: "ConfigMap", namespace: key.Namespace, name: key.Name}
				if _, err := s.store.record(k); err != nil {
					return err
				}
				s.stats.ProtectedWrites++
				s.checker.applied(s, r, cur, obj)
			}
			return err
		}); err != nil && !conflict {
			return
		}
		if !conflict {
			return
		}
	}
}

// apply makes the write in the store.
func (s *Sim) apply(r *request, cur, obj *corev1.ConfigMap) error {
	bg := context.Background()
	switch r.op {
	case admissionv1.Create:
		obj.SetUID(s.store.newUID())
		obj.SetCreationTimestamp(metav1.NewTime(s.clock.Now()))
		return s.store.head.Create(bg, obj)
	case admissionv1.Update:
		return s.store.head.Update(bg, obj)
	}
	return s.store.head.Delete(bg, cur, client.Preconditions{ResourceVersion: &cur.ResourceVersion})
}

// object is the object the request writes: the stored one with the
// request's fence and new data, or a new one.
func (r *request) object(cur *corev1.ConfigMap, namespace string) *corev1.ConfigMap {
	if r.op == admissionv1.Delete {
		return nil
	}
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: r.name,
		Labels: map[string]string{fencingv1alpha1.LabelProtectedBy: r.lease}}}
	if cur != nil {
		obj = cur.DeepCopy()
	}
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Data = map[string]string{"by": r.pod}
	if r.status {
		// The fence goes in the field manager; the metadata as it tries.
		switch r.meta {
		case metaUnlabel:
			delete(obj.Labels, fencingv1alpha1.LabelProtectedBy)
		case metaMoveFence:
			obj.Annotations[fencingv1alpha1.AnnotationFence] = record.FormatFence(math.MaxInt64)
		}
		return obj
	}
	obj.Annotations[fencingv1alpha1.AnnotationFence] = record.FormatFence(r.fence)
	return obj
}

// admission is the AdmissionReview request the API server sends for it, as
// the pod (its bound service-account token).
func (r *request) admission(old, obj *corev1.ConfigMap) admission.Request {
	raw := func(cm *corev1.ConfigMap) runtime.RawExtension {
		if cm == nil {
			return runtime.RawExtension{}
		}
		data, err := json.Marshal(cm)
		if err != nil {
			panic(err) // a ConfigMap always marshals
		}
		return runtime.RawExtension{Raw: data}
	}
	ns := ""
	if obj != nil {
		ns = obj.Namespace
	} else if old != nil {
		ns = old.Namespace
	}
	sub, options := "", runtime.RawExtension{}
	if r.status {
		sub = "status"
		options.Raw = []byte(fmt.Sprintf(`{"fieldManager":%q}`, fieldmanager.Format("worker", r.fence)))
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         types.UID("req-" + r.pod + "-" + r.name),
		SubResource: sub,
		Options:     options,
		Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:        r.name,
		Namespace:   ns,
		Operation:   r.op,
		UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:" + ns + ":default",
			Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/pod-name": {r.pod},
				"authentication.kubernetes.io/pod-uid":  {string(r.uid)},
			}},
		Object:    raw(obj),
		OldObject: raw(old),
	}}
}
