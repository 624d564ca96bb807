package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/test/cluster"
	"github.com/fencedlease/fencedlease/test/controllers/writelog"

	examplesv1alpha1 "github.com/fencedlease/fencedlease/examples/fenced-controller/api/v1alpha1"
)

// waitFencedHolder waits until the FencedLease names a holder (want, if
// not nil) with a fence above after, and that holder's controller has
// written every Widget with it: labelled protected, a slot, its status.
func (cd *ctrlDemo) waitFencedHolder(ns string, want *cluster.PodProcess, after int64, timeout time.Duration) (string, int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		fl := &fencingv1alpha1.FencedLease{}
		if err := cd.w.Get(cd.ctx, client.ObjectKey{Namespace: ns, Name: widgetLease}, fl); err != nil {
			return "", 0, err
		}
		if h := fl.Status.Holder; h != nil && fl.Status.Fence > after && (want == nil || h.PodName == want.Name) {
			ok, err := cd.writtenBy(ns, h.PodName, fl.Status.Fence)
			if err != nil {
				return "", 0, err
			}
			if ok {
				return h.PodName, fl.Status.Fence, nil
			}
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("no holder of FencedLease %s/%s above fence %d wrote every Widget in %s", ns, widgetLease, after, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLeader waits until one pod other than not has written every Widget
// (its slot and its status), and returns that pod.
func (cd *ctrlDemo) waitLeader(ns, not string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		ws, err := cd.widgets(ns)
		if err != nil {
			return "", err
		}
		if len(ws) > 0 && ws[0].Status.Holder != "" && ws[0].Status.Holder != not {
			if ok, err := cd.writtenBy(ns, ws[0].Status.Holder, 0); err != nil {
				return "", err
			} else if ok {
				return ws[0].Status.Holder, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no replica but %q wrote every Widget of %s in %s", not, ns, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writtenBy says whether every Widget has a slot and pod's status, with
// that fence and labelled protected (fence 0: unfenced).
func (cd *ctrlDemo) writtenBy(ns, pod string, fence int64) (bool, error) {
	ws, err := cd.widgets(ns)
	if err != nil || len(ws) < widgetCount {
		return false, err
	}
	for _, w := range ws {
		if w.Spec.Slot == nil || w.Status.Holder != pod || w.Status.Fence != fence {
			return false, nil
		}
		if fence > 0 && w.Labels[fencingv1alpha1.LabelProtectedBy] != widgetLease {
			return false, nil
		}
	}
	return true, nil
}

func (cd *ctrlDemo) widgets(ns string) ([]examplesv1alpha1.Widget, error) {
	list := &examplesv1alpha1.WidgetList{}
	if err := cd.w.List(cd.ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// overwritten counts the Widgets with a slot from a stale view (1000 and
// above: the late writer's).
func (cd *ctrlDemo) overwritten(ns string) (int, error) {
	ws, err := cd.widgets(ns)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, w := range ws {
		if w.Spec.Slot != nil && *w.Spec.Slot >= 1000 {
			n++
		}
	}
	return n, nil
}

func (cd *ctrlDemo) showWidgets(ns string) {
	ws, err := cd.widgets(ns)
	if err != nil {
		cd.say("list Widgets: %v", err)
		return
	}
	row := "%23s %-6s %-5s %-36s %-13s %-18s %s\n"
	fmt.Printf(row, "", "WIDGET", "SLOT", "STATUS.HOLDER", "STATUS.FENCE", "PROTECTED-BY", "FENCE (annotation)")
	for _, w := range ws {
		slot, prot, ann := "-", w.Labels[fencingv1alpha1.LabelProtectedBy], w.Annotations[fencingv1alpha1.AnnotationFence]
		if w.Spec.Slot != nil {
			slot = fmt.Sprint(*w.Spec.Slot)
		}
		fmt.Printf(row, "", w.Name, slot, w.Status.Holder, fmt.Sprint(w.Status.Fence), dash(prot), dash(ann))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// replicaLog is what a replica's log says after it was resumed.
type replicaLog struct {
	writes []writelog.Write
	// stopped is the error its manager stopped with, noticed how long
	// after the resume it said so.
	stopped string
	noticed time.Duration
}

func readReplicaLog(path string, resumedAt time.Time) (*replicaLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := &replicaLog{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if w, ok := writelog.Parse(line); ok {
			out.writes = append(out.writes, w)
			continue
		}
		if !strings.Contains(line, `"Problem running manager"`) || out.stopped != "" {
			continue
		}
		var l struct {
			TS    time.Time `json:"ts"`
			Error string    `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &l); err == nil {
			out.stopped, out.noticed = l.Error, l.TS.Sub(resumedAt)
		}
	}
	return out, sc.Err()
}

// writesSoFar counts a replica's writes up to now.
func writesSoFar(p *cluster.PodProcess) (writelog.Tally, error) {
	f, err := os.Open(p.LogFile())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ws, err := writelog.Read(f)
	if err != nil {
		return nil, err
	}
	return writelog.Count(ws), nil
}
