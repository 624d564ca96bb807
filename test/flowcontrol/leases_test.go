//go:build apf

package flowcontrol_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/internal/setup"
	"github.com/fencedlease/fencedlease/test/testenv"
)

// leaseWatch sees the renewals of the namespace's Leases as a reader of the
// Lease does: when each change of renewTime arrives on an administrator's
// watch (exempt from priority and fairness, so that the watch itself does
// not wait behind the load).
type leaseWatch struct {
	mu sync.Mutex
	// last is, per Lease, the grant (holder and transitions), the last
	// renewTime seen and when it arrived.
	last map[string]leaseSeen
	// gaps are the times between two renewals of the same grant that
	// arrived since the last reset; regrants are the Leases whose grant
	// changed, by name.
	gaps     []time.Duration
	regrants map[string]int
	gap      bool
}

type leaseSeen struct {
	grant   string
	renew   time.Time
	arrived time.Time
}

func watchLeases(ctx context.Context, cfg *rest.Config, ns string) (*leaseWatch, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		return nil, err
	}
	w := &leaseWatch{last: map[string]leaseSeen{}, regrants: map[string]int{}}
	err = testenv.Follow(ctx, c, ns, &coordinationv1.LeaseList{}, func() {
		w.mu.Lock()
		w.gap = true
		w.mu.Unlock()
	}, func(t watch.EventType, o runtime.Object) {
		if t != watch.Deleted {
			w.observe(o.(*coordinationv1.Lease))
		}
	})
	return w, err
}

func (w *leaseWatch) observe(l *coordinationv1.Lease) {
	now := time.Now()
	if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
		return
	}
	transitions := int32(0)
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions
	}
	// A grant writes holderIdentity and increments leaseTransitions, also
	// when it goes to the same pod again.
	grant := *l.Spec.HolderIdentity + "/" + strconv.Itoa(int(transitions))
	seen := leaseSeen{grant: grant, renew: l.Spec.RenewTime.Time, arrived: now}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, ok := w.last[l.Name]
	switch {
	case !ok:
	case prev.grant != grant:
		w.regrants[l.Name]++
	case !prev.renew.Equal(seen.renew):
		w.gaps = append(w.gaps, now.Sub(prev.arrived))
	default:
		return // another change of the same renewal
	}
	w.last[l.Name] = seen
}

// reset starts a new measurement: the gaps and regrants from now on.
func (w *leaseWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gaps, w.regrants = nil, map[string]int{}
}

// read returns the renewal gaps (sorted) and the Leases granted again since
// the last reset, but those whose name has the prefix skip; broken says the
// watch could not resume, so that nothing can be concluded.
func (w *leaseWatch) read(skip string) (gaps []time.Duration, regrants []string, broken bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gaps = slices.Clone(w.gaps)
	slices.Sort(gaps)
	for name := range w.regrants {
		if !strings.HasPrefix(name, skip) {
			regrants = append(regrants, name)
		}
	}
	slices.Sort(regrants)
	return gaps, regrants, w.gap
}
