package fencedlease

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// TestTheStatusPatchRunsBesideThePublicationsReads: the reconcile that
// commits a grant reads the Lease for its publication while its status
// patch is in flight, a first grant and a takeover alike, and still
// publishes the holder in the same reconcile. In a row, the status patch
// and then the reads were one round trip more on the way to a takeover's
// new holder.
//
// Between a commit and the status patch that records it, the status patch
// waits for a Lease read from the API server to be in flight, and such a
// read waits for the status patch: each notes whether the other came. In
// a row, neither ever sees the other.
func TestTheStatusPatchRunsBesideThePublicationsReads(t *testing.T) {
	key := types.NamespacedName{Namespace: "n", Name: "db"}
	a, b := runningPod("a", time.Hour), runningPod("b", time.Minute)
	c, r := grantWorld(t, dbFencedLease(fencingv1alpha1.TakeoverImmediate), a, b)
	o := &overlap{}
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			err := cl.Update(ctx, obj, opts...)
			if _, ok := obj.(*coordinationv1.Lease); ok && err == nil {
				o.committed()
			}
			return err
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*fencingv1alpha1.FencedLease); ok && sub == "status" {
				defer o.enter(&o.patching, &o.reading)()
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	r.APIReader = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				defer o.enter(&o.reading, &o.patching)()
			}
			return cl.Get(ctx, k, obj, opts...)
		},
	})

	first := reconcileUntilCommitted(t, r, c, key, 0)
	if got := published(t, c, "a"); got != first {
		t.Fatalf("first grant: pod a carries holder fence %d after the reconcile that committed fence %d", got, first)
	}
	if met, alone := o.result(); met == 0 || alone > 0 {
		t.Fatalf("first grant: the status patch met a Lease read in flight %d times and went alone %d times, want beside it every time", met, alone)
	}

	containersNotReady(t, c, a)
	next := reconcileUntilCommitted(t, r, c, key, first)
	if got := published(t, c, "b"); got != next || next <= first {
		t.Fatalf("takeover: pod b carries holder fence %d after the reconcile that committed fence %d (the first was %d)", got, next, first)
	}
	if met, alone := o.result(); met == 0 || alone > 0 {
		t.Fatalf("takeover: the status patch met a Lease read in flight %d times and went alone %d times, want beside it every time", met, alone)
	}
}

// overlap watches, between a commit and the next status patch, whether
// the status patch and a Lease read are in flight at once.
type overlap struct {
	mu                sync.Mutex
	armed, together   bool
	patching, reading int
	met, alone        int
}

// committed arms the watch: the next status patch records a commit.
func (o *overlap) committed() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed, o.together = true, false
}

// enter counts a call in flight in mine, notes whether one counted in
// other is in flight too and, while armed, waits up to a second for that;
// a status patch that waited disarms the watch. The returned func ends the
// call.
func (o *overlap) enter(mine, other *int) func() {
	o.mu.Lock()
	*mine++
	armed := o.armed
	if armed && *other > 0 {
		o.together = true
	}
	o.mu.Unlock()
	if armed {
		met := o.wait()
		o.mu.Lock()
		if mine == &o.patching {
			o.armed = false
			if met {
				o.met++
			} else {
				o.alone++
			}
		}
		o.mu.Unlock()
	}
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		*mine--
	}
}

// wait says whether the two were in flight at once within a second.
func (o *overlap) wait() bool {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		together := o.together
		o.mu.Unlock()
		if together {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// result returns how often the status patch after a commit met a Lease
// read in flight, and how often it went alone, and starts the count over.
func (o *overlap) result() (met, alone int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	met, alone = o.met, o.alone
	o.met, o.alone = 0, 0
	return met, alone
}
