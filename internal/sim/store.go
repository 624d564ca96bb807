package sim

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// objKey names one object of the simulated API server.
type objKey struct {
	kind      string
	namespace string
	name      string
}

func (k objKey) String() string {
	if k.namespace == "" {
		return k.kind + " " + k.name
	}
	return k.kind + " " + k.namespace + "/" + k.name
}

// version is one state of an object; obj is nil once it was deleted.
type version struct {
	rev int64
	obj client.Object
}

// Index is a field index that the controller registers with its cache; the
// simulated caches answer client.MatchingFields with the same functions.
type Index struct {
	Object  client.Object
	Field   string
	Extract client.IndexerFunc
}

// store is the simulated API server. Writes go to controller-runtime's fake
// client, which implements the API server's write semantics (preconditions on
// resourceVersion, merge patches, the status subresource, finalizers and
// deletionTimestamp) with one global resourceVersion counter, as etcd's
// revision. Two checks of the API server that the fake client lacks are made
// here: a patch that would change an object's UID is refused (keepsUID), and
// a delete's UID precondition is checked (deletesUID). Every change is also
// recorded here with a store revision, so that a cache can serve the state of
// any past revision.
type store struct {
	scheme *runtime.Scheme
	head   client.Client
	hist   map[objKey][]version
	rev    int64
	// rvs is, at each store revision, the highest resourceVersion any
	// object had had by then: a list's resourceVersion, as the API server
	// gives it (every write since has a higher one).
	rvs     []int64
	uids    int
	indexes map[string]map[string]client.IndexerFunc // kind -> field -> extract
}

func newStore(indexes []Index) (*store, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := fencingv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// The plain object tracker: the default one also keeps managed fields,
	// which costs most of the time of a run and decides nothing here.
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).WithGlobalResourceVersionCounter().
		WithStatusSubresource(&fencingv1alpha1.FencedLease{}, &fencingv1alpha1.FencedShardSet{}, &corev1.Pod{})
	s := &store{scheme: scheme, hist: map[objKey][]version{}, indexes: map[string]map[string]client.IndexerFunc{}}
	for _, ix := range indexes {
		b = b.WithIndex(ix.Object, ix.Field, ix.Extract)
		kind, err := s.kindOf(ix.Object)
		if err != nil {
			return nil, err
		}
		if s.indexes[kind] == nil {
			s.indexes[kind] = map[string]client.IndexerFunc{}
		}
		s.indexes[kind][ix.Field] = ix.Extract
	}
	s.head = b.Build()
	return s, nil
}

// kindOf returns the kind of a typed object, a typed list or a metadata-only
// object or list ("PodList" and "Pod" are both "Pod").
func (s *store) kindOf(obj runtime.Object) (string, error) {
	gvk, err := apiutil.GVKForObject(obj, s.scheme)
	if err != nil {
		return "", err
	}
	kind := gvk.Kind
	if meta.IsListType(obj) && len(kind) > 4 && kind[len(kind)-4:] == "List" {
		kind = kind[:len(kind)-4]
	}
	return kind, nil
}

func (s *store) gvk(kind string) (schema.GroupVersionKind, error) {
	if gvk, ok := storedKinds[kind]; ok {
		return gvk, nil
	}
	return schema.GroupVersionKind{}, fmt.Errorf("unknown kind %s", kind)
}

// storedKinds are the kinds the simulated API server keeps.
var storedKinds = map[string]schema.GroupVersionKind{
	"FencedLease":    fencingv1alpha1.GroupVersion.WithKind("FencedLease"),
	"FencedShardSet": fencingv1alpha1.GroupVersion.WithKind("FencedShardSet"),
	"Lease":          coordinationv1.SchemeGroupVersion.WithKind("Lease"),
	"Pod":            corev1.SchemeGroupVersion.WithKind("Pod"),
	"Node":           corev1.SchemeGroupVersion.WithKind("Node"),
	"ConfigMap":      corev1.SchemeGroupVersion.WithKind("ConfigMap"),
}

func (s *store) keyOf(obj client.Object) (objKey, error) {
	kind, err := s.kindOf(obj)
	if err != nil {
		return objKey{}, err
	}
	return objKey{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName()}, nil
}

// at returns the object as it was at store revision rev, or nil.
func (s *store) at(k objKey, rev int64) client.Object {
	var out client.Object
	for _, v := range s.hist[k] {
		if v.rev > rev {
			break
		}
		out = v.obj
	}
	return out
}

// headObj returns the current state of an object, or nil.
func (s *store) headObj(k objKey) client.Object { return s.at(k, s.rev) }

// record reads an object back from the fake client after a write and appends
// its new state to the history when it changed.
func (s *store) record(k objKey) (client.Object, error) {
	gvk, err := s.gvk(k.kind)
	if err != nil {
		return nil, err
	}
	o, err := s.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	obj := o.(client.Object)
	err = s.head.Get(context.Background(), types.NamespacedName{Namespace: k.namespace, Name: k.name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		obj = nil
	case err != nil:
		return nil, err
	default:
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	prev := s.headObj(k)
	if prev == nil && obj == nil {
		return nil, nil
	}
	if prev != nil && obj != nil && prev.GetResourceVersion() == obj.GetResourceVersion() {
		return obj, nil
	}
	s.rev++
	s.hist[k] = append(s.hist[k], version{rev: s.rev, obj: obj})
	top := int64(0)
	if n := len(s.rvs); n > 0 {
		top = s.rvs[n-1]
	}
	if obj != nil {
		if v, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64); err == nil {
			top = max(top, v)
		}
	}
	for int64(len(s.rvs)) < s.rev {
		s.rvs = append(s.rvs, top)
	}
	return obj, nil
}

// newUID hands out deterministic UIDs.
func (s *store) newUID() types.UID {
	s.uids++
	return types.UID(fmt.Sprintf("uid-%04d", s.uids))
}

// get serves a Get from the state at rev.
func (s *store) get(rev int64, key client.ObjectKey, obj client.Object) error {
	k, err := s.keyOf(obj)
	if err != nil {
		return err
	}
	k.namespace, k.name = key.Namespace, key.Name
	cur := s.at(k, rev)
	if cur == nil {
		return apierrors.NewNotFound(resourceOf(k.kind), key.Name)
	}
	return copyInto(cur, obj)
}

// list serves a List from the state at rev, sorted by namespace and name.
func (s *store) list(rev int64, list client.ObjectList, opts ...client.ListOption) error {
	kind, err := s.kindOf(list)
	if err != nil {
		return err
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	var keys []objKey
	for k := range s.hist {
		if k.kind == kind && (lo.Namespace == "" || k.namespace == lo.Namespace) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].namespace != keys[j].namespace {
			return keys[i].namespace < keys[j].namespace
		}
		return keys[i].name < keys[j].name
	})
	_, metadataOnly := list.(*metav1.PartialObjectMetadataList)
	var items []runtime.Object
	for _, k := range keys {
		cur := s.at(k, rev)
		if cur == nil {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(cur.GetLabels())) {
			continue
		}
		ok, err := s.matchFields(kind, cur, lo.FieldSelector)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if metadataOnly {
			items = append(items, metadataOf(cur))
			continue
		}
		items = append(items, cur.DeepCopyObject())
	}
	if err := meta.SetList(list, items); err != nil {
		return err
	}
	top := int64(0)
	if rev > 0 && int(rev) <= len(s.rvs) {
		top = s.rvs[rev-1]
	}
	list.SetResourceVersion(strconv.FormatInt(top, 10))
	return nil
}

// matchFields answers a field selector with the registered indexes, as the
// controller-runtime cache does (exact matches on one indexed field).
func (s *store) matchFields(kind string, obj client.Object, sel fields.Selector) (bool, error) {
	if sel == nil || sel.Empty() {
		return true, nil
	}
	for _, r := range sel.Requirements() {
		extract := s.indexes[kind][r.Field]
		if extract == nil {
			return false, fmt.Errorf("no index %q for %s", r.Field, kind)
		}
		found := false
		for _, v := range extract(obj) {
			if v == r.Value {
				found = true
			}
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

// copyInto copies a stored object into the caller's object, which may be a
// metadata-only object.
func copyInto(from client.Object, to client.Object) error {
	if pm, ok := to.(*metav1.PartialObjectMetadata); ok {
		*pm = *metadataOf(from)
		return nil
	}
	src, dst := reflect.ValueOf(from.DeepCopyObject()), reflect.ValueOf(to)
	if src.Type() != dst.Type() {
		return fmt.Errorf("cannot read a %s into a %s", src.Type(), dst.Type())
	}
	dst.Elem().Set(src.Elem())
	return nil
}

// metadataOf is the metadata-only form of a stored object.
func metadataOf(obj client.Object) *metav1.PartialObjectMetadata {
	om := reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").Addr().Interface().(*metav1.ObjectMeta)
	pm := &metav1.PartialObjectMetadata{ObjectMeta: *om.DeepCopy()}
	pm.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return pm
}

// resourceOf names the resource of a kind in NotFound errors.
func resourceOf(kind string) schema.GroupResource {
	switch kind {
	case "FencedLease":
		return schema.GroupResource{Group: fencingv1alpha1.GroupVersion.Group, Resource: "fencedleases"}
	case "Lease":
		return schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	case "Pod":
		return schema.GroupResource{Resource: "pods"}
	case "Node":
		return schema.GroupResource{Resource: "nodes"}
	case "ConfigMap":
		return schema.GroupResource{Resource: "configmaps"}
	}
	return schema.GroupResource{Resource: kind}
}
