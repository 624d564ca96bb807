package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// status prints the FencedLeases of the namespace (or of all, or one).
func status(ctx context.Context, o options, out io.Writer) error {
	c, err := o.connect()
	if err != nil {
		return err
	}
	switch len(o.args) {
	case 0:
	case 1:
		if o.allNamespaces {
			return fmt.Errorf("status %s: a name needs one namespace (-n), not -A", o.args[0])
		}
		return describe(ctx, c, o, out, o.args[0])
	default:
		return fmt.Errorf("status takes at most one FencedLease name, got %d", len(o.args))
	}
	var list fencingv1alpha1.FencedLeaseList
	var opts []client.ListOption
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(o.namespace))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return fmt.Errorf("list FencedLeases: %w", err)
	}
	if len(list.Items) == 0 {
		where := "in namespace " + o.namespace
		if o.allNamespaces {
			where = "in any namespace"
		}
		_, err := fmt.Fprintf(out, "No FencedLeases %s.\n", where)
		return err
	}
	leases := leasesOf(ctx, c, list.Items)
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "NAME\tHOLDER\tFENCE\tEXPIRES\tRENEWAL\tTAKEOVER\tCANDIDATES\tSTATE"
	if o.allNamespaces {
		head = "NAMESPACE\t" + head
	}
	fmt.Fprintln(tw, head)
	for i := range list.Items {
		fl := &list.Items[i]
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s", fl.Name, holderName(fl), fl.Status.Fence, expiresIn(fl, leases[client.ObjectKeyFromObject(fl)], o.now()),
			renewalOf(fl), takeoverOf(fl), fl.Status.Candidates, stateOf(fl))
		if o.allNamespaces {
			row = fl.Namespace + "\t" + row
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

func holderName(fl *fencingv1alpha1.FencedLease) string {
	if fl.Status.Holder == nil {
		return "<none>"
	}
	return fl.Status.Holder.PodName
}

// leasesOf reads the Leases of the FencedLeases, by name, from their
// namespaces only: a cluster has Leases in other namespaces that are none of
// ours (one per node in kube-node-lease), and a user who may list
// FencedLeases everywhere may read Leases only where they work. Where the
// user may not read Leases, the expiry comes from the status alone.
func leasesOf(ctx context.Context, c client.Client, fls []fencingv1alpha1.FencedLease) map[types.NamespacedName]*coordinationv1.Lease {
	out := map[types.NamespacedName]*coordinationv1.Lease{}
	seen := map[string]bool{}
	for i := range fls {
		ns := fls[i].Namespace
		if seen[ns] {
			continue
		}
		seen[ns] = true
		var list coordinationv1.LeaseList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			continue
		}
		for j := range list.Items {
			out[client.ObjectKeyFromObject(&list.Items[j])] = &list.Items[j]
		}
	}
	return out
}

// expiresIn is the time left of the current grant: for people (the operator
// judges expiry on its own monotonic clock). The status records a renewal
// at most every few minutes while the operator is under load; the
// FencedLease's own Lease, when it carries a later renewal of the same
// holder, has the current one.
func expiresIn(fl *fencingv1alpha1.FencedLease, l *coordinationv1.Lease, now time.Time) string {
	expires := fl.Status.ExpireTime
	if expires == nil {
		return "-"
	}
	if l != nil && metav1.IsControlledBy(l, fl) && fl.Status.Holder != nil && ptr.Deref(l.Spec.HolderIdentity, "") == fl.Status.Holder.PodName &&
		l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		if e := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second); e.After(expires.Time) {
			expires = &metav1.MicroTime{Time: e}
		}
	}
	left := expires.Sub(now).Round(time.Second)
	if left < 0 {
		return "expired " + (-left).String() + " ago"
	}
	return left.String()
}

func renewalOf(fl *fencingv1alpha1.FencedLease) string {
	if fl.Spec.Renewal == "" {
		return string(fencingv1alpha1.RenewalOperator)
	}
	return string(fl.Spec.Renewal)
}

func takeoverOf(fl *fencingv1alpha1.FencedLease) string {
	if fl.Spec.Takeover == "" {
		return string(fencingv1alpha1.TakeoverSafe)
	}
	return string(fl.Spec.Takeover)
}

// stateOf is the reason of Degraded when degraded, else of Held.
func stateOf(fl *fencingv1alpha1.FencedLease) string {
	if d := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionDegraded); d != nil && d.Status == "True" {
		return "Degraded: " + d.Reason
	}
	if fl.Spec.Paused {
		return "Paused"
	}
	if h := meta.FindStatusCondition(fl.Status.Conditions, fencingv1alpha1.ConditionHeld); h != nil {
		return h.Reason
	}
	return "Unknown"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
