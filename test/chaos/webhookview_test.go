//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// webhookView records what the fencing webhook decides on: the holder and
// fence each FencedLease's status names in the primary operator's cache (the
// webhooks read that cache), with the time the cache saw each change, on the
// run's clock. Compared with the status as etcd applied it (the history's
// status holdings), it measures how far the webhook's view lagged behind,
// which is the admission window of design.md, invariant 4: a write the
// webhook admits on a grant its cache still shows, after the grant ended.
// It explains, never excuses: the checks are unchanged.
type webhookView struct {
	rec   *Recorder
	mu    sync.Mutex
	open  map[string]Holding // by lease
	holds []Holding
}

func newWebhookView(rec *Recorder) *webhookView {
	return &webhookView{rec: rec, open: map[string]Holding{}}
}

// register adds the recording to a primary's manager: an event handler on
// its FencedLease informer. A new primary (after a crash) starts with what
// its cache lists.
func (v *webhookView) register(m ctrl.Manager) error {
	inf, err := m.GetCache().GetInformer(context.Background(), &fencingv1alpha1.FencedLease{})
	if err != nil {
		return fmt.Errorf("FencedLease informer: %w", err)
	}
	observe := func(obj any) {
		if fl, ok := obj.(*fencingv1alpha1.FencedLease); ok {
			v.observe(fl)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	})
	return err
}

func (v *webhookView) observe(fl *fencingv1alpha1.FencedLease) {
	at := v.rec.Now()
	var uid types.UID
	var pod string
	if h := fl.Status.Holder; h != nil {
		uid, pod = h.PodUID, h.PodName
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, ok := v.open[fl.Name]
	if ok && cur.PodUID == uid && cur.Fence == fl.Status.Fence {
		return
	}
	if ok {
		cur.To = at
		v.holds = append(v.holds, cur)
		delete(v.open, fl.Name)
	}
	if uid != "" {
		v.open[fl.Name] = Holding{Lease: fl.Name, Pod: pod, PodUID: uid, Fence: fl.Status.Fence, From: at, To: Open}
	}
}

// lags compares the webhook's view with the status as the history recorded
// it (from etcd on the HA control plane, from an API server's watch on
// envtest): for
// every grant whose end the status recorded, how long after the status the
// webhook's cache stopped naming it, and the accepted writes that only the
// webhook's lagging view covers (the status had already ended the grant,
// and no pod publication or own read covers them either).
func (v *webhookView) lags(h *History, window time.Duration) string {
	v.mu.Lock()
	view := append([]Holding(nil), v.holds...)
	for _, o := range v.open {
		view = append(view, o)
	}
	v.mu.Unlock()
	type key struct {
		lease string
		uid   types.UID
		fence int64
	}
	viewEnd := map[key]time.Duration{}
	for _, hd := range view {
		k := key{hd.Lease, hd.PodUID, hd.Fence}
		viewEnd[k] = max(viewEnd[k], hd.To)
	}
	var ends []time.Duration
	statusEnd := map[key]time.Duration{}
	covered := map[key]time.Duration{} // latest end of a pod publication or own read
	for _, hd := range h.Holdings {
		k := key{hd.Lease, hd.PodUID, hd.Fence}
		switch {
		case hd.Via == ViaStatus && hd.To != Open:
			statusEnd[k] = max(statusEnd[k], hd.To)
			if e, ok := viewEnd[k]; ok && e != Open {
				ends = append(ends, e-hd.To)
			}
		case hd.Via != ViaStatus:
			covered[k] = max(covered[k], hd.To)
		}
	}
	late, maxLate := 0, time.Duration(0)
	for _, a := range h.Attempts {
		k := key{a.Lease, a.PodUID, a.Fence}
		se, ended := statusEnd[k]
		if a.Outcome != Accepted || !ended || a.Call <= se || a.Call <= covered[k]+window {
			continue
		}
		if e, ok := viewEnd[k]; ok && (e == Open || e >= a.Call) {
			late++
			maxLate = max(maxLate, a.Call-se)
		}
	}
	if len(ends) == 0 {
		return "webhook view: no ended grant seen"
	}
	slices.Sort(ends)
	q := func(p float64) time.Duration {
		return ends[min(len(ends)-1, int(p*float64(len(ends))))].Round(time.Millisecond)
	}
	return fmt.Sprintf("webhook view: the primary's cache stopped naming an ended grant %s after the history's status did (median), p99 %s, max %s (%d grants); "+
		"accepted writes that only its lagging view covered, past the %s window: %d (up to %s after the status ended the grant)",
		q(0.5), q(0.99), ends[len(ends)-1].Round(time.Millisecond), len(ends), window, late, maxLate.Round(time.Millisecond))
}
