package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// describe tells the story of one FencedLease: its grant, its timing, its
// conditions and its candidate pods.
func describe(ctx context.Context, c client.Client, o options, out io.Writer, name string) error {
	d, err := fetchDescribed(ctx, c, types.NamespacedName{Namespace: o.namespace, Name: name})
	if err != nil {
		return err
	}
	return printDescribed(out, d, o.now())
}

// described is what describe shows: a FencedLease, its Lease (nil when it
// cannot be read) and its candidate pods.
type described struct {
	fl    *fencingv1alpha1.FencedLease
	lease *coordinationv1.Lease
	pods  []corev1.Pod
}

// fetchDescribed reads the FencedLease key names, its Lease and its
// candidate pods.
func fetchDescribed(ctx context.Context, c client.Client, key types.NamespacedName) (described, error) {
	fl := &fencingv1alpha1.FencedLease{}
	if err := c.Get(ctx, key, fl); err != nil {
		if apierrors.IsNotFound(err) {
			return described{}, fmt.Errorf("FencedLease %s not found", key)
		}
		return described{}, fmt.Errorf("get FencedLease %s: %w", key, err)
	}
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, l); err != nil {
		l = nil // not readable: the status alone
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels{fencingv1alpha1.LabelLease: key.Name}); err != nil {
		return described{}, fmt.Errorf("list the candidate pods of FencedLease %s: %w", key, err)
	}
	return described{fl: fl, lease: l, pods: pods.Items}, nil
}

// printDescribed writes d as of now: the grant, the spec and the
// conditions aligned in two columns, then the table of candidates.
func printDescribed(out io.Writer, d described, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	describeGrant(w, d.fl, d.lease, now)
	describeSpec(w, d.fl)
	describeConditions(w, d.fl)
	if err := w.Flush(); err != nil {
		return err
	}
	return describeCandidates(out, d.fl, d.pods)
}

// describeGrant writes the holder, when the grant expires and what became
// of a deleted Lease.
func describeGrant(w io.Writer, fl *fencingv1alpha1.FencedLease, l *coordinationv1.Lease, now time.Time) {
	fmt.Fprintf(w, "FencedLease:\t%s/%s\n", fl.Namespace, fl.Name)
	if h := fl.Status.Holder; h != nil {
		since := ""
		if fl.Status.AcquireTime != nil {
			since = ", granted " + now.Sub(fl.Status.AcquireTime.Time).Round(time.Second).String() + " ago"
		}
		node := ""
		if h.NodeName != "" {
			node = " on node " + h.NodeName
		}
		fmt.Fprintf(w, "Holder:\tpod %s%s, fence %d%s\n", h.PodName, node, fl.Status.Fence, since)
	} else {
		fmt.Fprintf(w, "Holder:\tnone (last fence %d)\n", fl.Status.Fence)
	}
	fmt.Fprintf(w, "Expires:\t%s\n", expiresIn(fl, l, now))
	if l != nil && l.DeletionTimestamp != nil {
		fmt.Fprintf(w, "Lease:\tdeleted %s ago; kept until its grant is over, then re-created\n",
			now.Sub(l.DeletionTimestamp.Time).Round(time.Second))
	}
}

// describeSpec writes the timing and the takeover the spec asks for, and
// how many grants there were.
func describeSpec(w io.Writer, fl *fencingv1alpha1.FencedLease) {
	lease := time.Duration(fl.Spec.LeaseDurationSeconds) * time.Second
	renew := lease / 3
	if fl.Spec.RenewIntervalSeconds != nil {
		renew = time.Duration(*fl.Spec.RenewIntervalSeconds) * time.Second
	}
	fmt.Fprintf(w, "Timing:\tlease %s, renewed every %s by the %s\n", lease, renew, strings.ToLower(renewalOf(fl)))
	maxHold := "unlimited"
	if fl.Spec.MaxHoldSeconds > 0 {
		maxHold = (time.Duration(fl.Spec.MaxHoldSeconds) * time.Second).String()
	}
	fmt.Fprintf(w, "Takeover:\t%s, max hold %s, paused %t\n", takeoverOf(fl), maxHold, fl.Spec.Paused)
	fmt.Fprintf(w, "Grants:\t%d\n", fl.Status.Transitions)
}

// describeConditions writes the conditions and a handoff asked for.
func describeConditions(w io.Writer, fl *fencingv1alpha1.FencedLease) {
	for _, t := range []string{fencingv1alpha1.ConditionReady, fencingv1alpha1.ConditionHeld, fencingv1alpha1.ConditionDegraded} {
		if cond := meta.FindStatusCondition(fl.Status.Conditions, t); cond != nil {
			msg := cond.Message
			if msg != "" {
				msg = ": " + msg
			}
			fmt.Fprintf(w, "%s:\t%s (%s)%s\n", t, cond.Status, cond.Reason, msg)
		}
	}
	if req := fl.Annotations[fencingv1alpha1.AnnotationHandoffRequestedAt]; req != "" {
		state := "pending"
		if req == fl.Status.LastHandledHandoffAt {
			state = "handled"
		}
		fmt.Fprintf(w, "Handoff:\trequested at %s, %s\n", req, state)
	}
}

// describeCandidates writes a table of the candidate pods, by name.
func describeCandidates(out io.Writer, fl *fencingv1alpha1.FencedLease, pods []corev1.Pod) error {
	fmt.Fprintf(out, "Candidates (%d eligible):\n", fl.Status.Candidates)
	if len(pods) == 0 {
		_, err := fmt.Fprintln(out, "  none")
		return err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POD\tROLE\tFENCE\tNODE\tPHASE")
	for _, p := range pods {
		role, fence := p.Annotations[fencingv1alpha1.AnnotationRole], p.Annotations[fencingv1alpha1.AnnotationFence]
		if role == "" {
			role = "-"
		}
		if _, err := record.ParseFence(fence); err != nil {
			fence = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Name, role, fence, orDash(p.Spec.NodeName), p.Status.Phase)
	}
	return tw.Flush()
}
