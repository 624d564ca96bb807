package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	"github.com/fencedlease/fencedlease/internal/record"
)

// shards prints a FencedShardSet: its conditions, how many shards each pod
// owns, and every shard with its owner and fence as its Lease records them,
// and whether the owner's pod was told (its annotation lists the shard with
// that fence).
func shards(ctx context.Context, o options, out io.Writer) error {
	if len(o.args) != 1 || o.allNamespaces {
		return fmt.Errorf("shards takes one FencedShardSet name and one namespace (-n), got %d names", len(o.args))
	}
	c, err := o.connect()
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: o.namespace, Name: o.args[0]}
	set := &fencingv1alpha1.FencedShardSet{}
	if err := c.Get(ctx, key, set); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("FencedShardSet %s not found", key)
		}
		return fmt.Errorf("get FencedShardSet %s: %w", key, err)
	}
	owned := client.MatchingLabels{record.LabelShardSet: set.Name}
	leases := &coordinationv1.LeaseList{}
	if err := c.List(ctx, leases, client.InNamespace(set.Namespace), owned); err != nil {
		return fmt.Errorf("list the Leases of FencedShardSet %s: %w", key, err)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(set.Namespace), owned); err != nil {
		return fmt.Errorf("list the pods of FencedShardSet %s: %w", key, err)
	}
	published := map[string]map[string]int64{}
	for _, p := range pods.Items {
		if s, err := record.ParseShards(p.Annotations[record.AnnotationShards]); err == nil {
			published[p.Name] = s
		}
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		if metav1.IsControlledBy(&leases.Items[i], set) {
			byName[leases.Items[i].Name] = &leases.Items[i]
		}
	}
	printSet(out, set)
	printPods(out, published)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tOWNER\tFENCE\tSTATE\tTOLD")
	for _, k := range set.ShardKeys() {
		fmt.Fprintln(tw, shardRow(k, byName[record.ShardLeaseName(set.Name, k)], published))
	}
	return tw.Flush()
}

func printSet(out io.Writer, set *fencingv1alpha1.FencedShardSet) {
	st := set.Status
	fmt.Fprintf(out, "FencedShardSet: %s/%s\n", set.Namespace, set.Name)
	fmt.Fprintf(out, "Shards:  %d, %d owned, %d moving, over %d eligible pods\n", st.Shards, st.Owned, st.Moving, st.Pods)
	for _, t := range []string{fencingv1alpha1.ConditionReady, fencingv1alpha1.ConditionDegraded} {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
			fmt.Fprintf(out, "%s:%s%s (%s): %s\n", t, pad(t), c.Status, c.Reason, c.Message)
		}
	}
}

func pad(s string) string { return "         "[:max(1, 9-len(s))] }

// printPods prints how many shards each pod is told it owns.
func printPods(out io.Writer, published map[string]map[string]int64) {
	names := make([]string, 0, len(published))
	for p, s := range published {
		if len(s) > 0 {
			names = append(names, p)
		}
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tSHARDS")
	for _, p := range names {
		fmt.Fprintf(tw, "%s\t%d\n", p, len(published[p]))
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
}

// shardRow is one shard: its owner and fence as its Lease records them,
// its grant's state, and whether the owner's pod lists it with that fence.
func shardRow(key string, l *coordinationv1.Lease, published map[string]map[string]int64) string {
	if l == nil {
		return key + "\t<none>\t-\tnot granted\t-"
	}
	rec := record.ParseLease(l.Annotations)
	owner, state := ptr.Deref(l.Spec.HolderIdentity, ""), rec.State
	if state == "" {
		state = "not granted"
	}
	if !rec.Held() {
		return fmt.Sprintf("%s\t<none>\t%d\t%s (was %s)\t-", key, rec.Fence, state, owner)
	}
	told := "yes"
	switch f, ok := published[owner][key]; {
	case !ok:
		told = "not yet"
	case f != rec.Fence:
		told = fmt.Sprintf("no: the pod lists fence %d", f)
	}
	return fmt.Sprintf("%s\t%s\t%d\t%s\t%s", key, owner, rec.Fence, state, told)
}
