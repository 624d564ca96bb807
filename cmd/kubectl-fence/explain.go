package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
	rules "github.com/fencedlease/fencedlease/internal/fencing"
	"github.com/fencedlease/fencedlease/internal/record"
)

// explanation is what a denial reason means and what to do about it.
type explanation struct {
	reason rules.Reason
	// pattern recognizes the webhook's message (internal/fencing formats it).
	pattern   *regexp.Regexp
	why, todo string
}

// protector matches how a denial names what protects the object: a
// FencedLease, or a shard of a FencedShardSet.
const protector = `(?:FencedLease "[^"]*"|shard "[^"]*" of FencedShardSet "[^"]*")`

// explanations cover every reason the fencing webhook denies with, in the
// order their messages are told apart.
var explanations = []explanation{
	{rules.ReasonLabelChanged, regexp.MustCompile(`label fencedlease\.io/protected-by=\S* cannot be`),
		"the write removes or changes the protected-by label, which would take the object out of the lease's protection",
		"keep the label as it is; to unprotect an object, ask someone with break-glass rights (--break-glass-user/--break-glass-group) or delete and re-create it through the holder"},
	{rules.ReasonSubresourceMetadata, regexp.MustCompile(`write cannot change annotation fencedlease\.io/fence`),
		"a subresource write (status, scale) would change the object's stored fence: only a write of the object itself moves it",
		"leave the fencedlease.io/fence annotation as it is on subresource writes; the holder moves it by writing the object with its fence"},
	{rules.ReasonOwnerUnprotected, regexp.MustCompile(`owner .* is not protected by ` + protector),
		"the write gives the protected object an owner that is neither its FencedLease nor an object that FencedLease protects: deleting that owner, which needs no fence, would make the garbage collector delete this object",
		"own the object by the FencedLease itself, or by an object of a protected resource labelled fencedlease.io/protected-by with the same FencedLease; or leave the ownerReference out"},
	{rules.ReasonInvalidLabel, regexp.MustCompile(`label fencedlease\.io/protected-by must name a (?:FencedLease|FencedShardSet)|label fencedlease\.io/shard must name a shard`),
		"the protected-by label is empty",
		"set the label to the name of a FencedLease in the object's namespace"},
	{rules.ReasonMissingFence, regexp.MustCompile(`no fencedlease\.io/fence annotation`),
		"the write carries no fence: only the holder may write a protected object, and it must show its fence",
		"write from the holder pod with the annotation fencedlease.io/fence set to its token (/etc/fencedlease/fence, $FENCE_TOKEN under fence run, or fence.Stamp in Go)"},
	{rules.ReasonMalformedFence, regexp.MustCompile(`annotation fencedlease\.io/fence: `),
		"the fence annotation is not a canonical positive decimal number",
		"copy the token exactly as the pod's /etc/fencedlease/fence file holds it: digits only, no sign, spaces or leading zeros"},
	{rules.ReasonDeleteOlderWrite, regexp.MustCompile(`the holder deletes only what carries its current fence`),
		"the holder pod may delete only an object it last wrote with its current fence: a delete carries no fence, and the pod's identity cannot tell its current grant from an older one of the same pod",
		"write the current fence on the object (fence.Stamp and an update, or kubectl annotate --overwrite fencedlease.io/fence=$(cat /etc/fencedlease/fence)), then delete it with that resourceVersion as precondition; pkg/fencedcontroller's Delete does both"},
	{rules.ReasonObjectFenceRegression, regexp.MustCompile(`the object was last written with fence \d+`),
		"the object was last written with a higher fence than this write carries: a newer holder has written it since",
		"this writer's grant is over; stop writing, and read the object again (and the token file) before acting as holder"},
	{rules.ReasonStaleFence, regexp.MustCompile(`stale holder: ` + protector + ` is at fence \d+`),
		"the write carries an older fence than the FencedLease's current one: the writer is a stale holder (paused, partitioned, or it missed that it lost the lease)",
		"nothing to repair: fencing did its job. Make the workload stop when its token file says standby (fence run, or fence.Session in Go, do that) and check why it kept writing"},
	{rules.ReasonUnknownFence, regexp.MustCompile(`unknown fence: ` + protector + ` is at fence \d+|carries fence \d+, which ` + protector + ` never granted`),
		"the write carries a fence higher than any the FencedLease ever granted (it was not read from a token file), or the object to delete carries one (written by a break-glass user, or the storage was restored)",
		"use the pod's own token; a made-up or copied number is rejected. For a delete, ask a break-glass user to repair or delete the object"},
	{rules.ReasonLeaseNotFound, regexp.MustCompile(`(?:FencedLease|FencedShardSet) "[^"]*" not found in namespace`),
		"the protected-by label names a FencedLease (or, with the shard label, a FencedShardSet) that does not exist in the object's namespace",
		"create the FencedLease (or FencedShardSet), or fix the label"},
	{rules.ReasonUnknownShard, regexp.MustCompile(`FencedShardSet "[^"]*" has no shard "[^"]*"`),
		"the shard label names a key that is not one of the set's shards (spec.shards counts them \"0\" to \"N-1\"; spec.keys lists them), or the set shrank and no longer has it",
		"fix the fencedlease.io/shard label (a break-glass user may change it), or give the set that shard"},
	{rules.ReasonNoHolder, regexp.MustCompile(protector + ` has no holder`),
		"nobody holds the lease at the moment (a takeover is waiting for the old grant to expire, or no candidate is ready)",
		"wait for the next holder: kubectl fence status NAME says what the lease waits for"},
	{rules.ReasonNotHolder, regexp.MustCompile(`pod \S+ is not the holder of ` + protector),
		"the writer is a pod, but not the current holder: a standby, or a former holder",
		"only the holder writes; a standby waits for its token file to say holder (fence run does)"},
	{rules.ReasonWriteNotPod, regexp.MustCompile(`is not a pod: only the holder pod`),
		"the writer is not a pod (a person, a CI job, a controller): a fence proves nothing by itself, only the holder pod's bound identity does",
		"write through the holder pod, or, for a repair, as a break-glass user or group (audited)"},
	{rules.ReasonDeleteNotPod, regexp.MustCompile(`a delete carries no fence`),
		"a delete cannot carry a fence, so only the holder pod may delete a protected object",
		"delete from the holder pod, remove protection first as a break-glass user, or delete the namespace (its cleanup is allowed)"},
}

// explain recognizes a denial message; ok is false when it is none of the
// fencing webhook's.
func explain(msg string) (explanation, bool) {
	for _, e := range explanations {
		if e.pattern.MatchString(msg) {
			return e, true
		}
	}
	return explanation{}, false
}

var objectArg = regexp.MustCompile(`^(configmaps?|cm|secrets?)/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`)

// explainDenial explains a denial message (the arguments, or standard input
// for "-"), or the protection of an object (configmap/NAME, secret/NAME).
func explainDenial(ctx context.Context, o options, out io.Writer) error {
	if len(o.args) == 0 {
		return fmt.Errorf("explain-denial needs a denial message (or - to read it from standard input), or configmap/NAME or secret/NAME")
	}
	if m := objectArg.FindStringSubmatch(o.args[0]); m != nil && len(o.args) == 1 {
		return explainObject(ctx, o, out, strings.HasPrefix(m[1], "s"), m[2])
	}
	msg := strings.Join(o.args, " ")
	if msg == "-" {
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("read the message from standard input: %w", err)
		}
		msg = string(data)
	}
	e, ok := explain(msg)
	if !ok {
		return fmt.Errorf("not a denial of the fencing webhook (admission webhook \"protected.fencedlease.io\"): %q", strings.TrimSpace(msg))
	}
	_, err := fmt.Fprintf(out, "Reason:  %s\nWhy:     %s\nWhat to do: %s\n", e.reason, e.why, e.todo)
	return err
}

// explainObject says whether an object is protected, by which FencedLease,
// who may write it and with which fence.
func explainObject(ctx context.Context, o options, out io.Writer, secret bool, name string) error {
	c, err := o.connect()
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: o.namespace, Name: name}
	kind := "ConfigMap"
	var obj client.Object = &corev1.ConfigMap{}
	if secret {
		// Only the metadata matters; a Secret's data is never printed.
		kind, obj = "Secret", &corev1.Secret{}
	}
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s not found", kind, key)
		}
		return fmt.Errorf("get %s %s: %w", kind, key, err)
	}
	lease, protected := obj.GetLabels()[fencingv1alpha1.LabelProtectedBy]
	if !protected {
		_, err := fmt.Fprintf(out, "%s %s is not protected (no label %s): the fencing webhook never sees its writes.\n", kind, key, fencingv1alpha1.LabelProtectedBy)
		return err
	}
	stored := obj.GetAnnotations()[fencingv1alpha1.AnnotationFence]
	if stored == "" {
		stored = "none"
	}
	if shard, sharded := obj.GetLabels()[fencingv1alpha1.LabelShard]; sharded {
		fmt.Fprintf(out, "%s %s is protected by shard %q of FencedShardSet %q; last written with fence %s.\n", kind, key, shard, lease, stored)
		return explainShard(ctx, c, o, out, lease, shard)
	}
	fmt.Fprintf(out, "%s %s is protected by FencedLease %q; last written with fence %s.\n", kind, key, lease, stored)
	fl := &fencingv1alpha1.FencedLease{}
	switch err := c.Get(ctx, types.NamespacedName{Namespace: o.namespace, Name: lease}, fl); {
	case apierrors.IsNotFound(err):
		_, err := fmt.Fprintf(out, "FencedLease %q does not exist in namespace %s: every write is denied (%s) until it does.\n", lease, o.namespace, rules.ReasonLeaseNotFound)
		return err
	case err != nil:
		return fmt.Errorf("get FencedLease %s/%s: %w", o.namespace, lease, err)
	}
	if fl.Status.Holder == nil {
		_, err := fmt.Fprintf(out, "FencedLease %q has no holder now (%s): every write is denied (%s) until a pod is granted.\n", lease, stateOf(fl), rules.ReasonNoHolder)
		return err
	}
	_, err = fmt.Fprintf(out, "Only pod %s, the holder, may write it now, with the annotation %s: \"%d\"; writes with a lower fence are stale (%s), from other pods %s, from non-pods %s.\n",
		fl.Status.Holder.PodName, fencingv1alpha1.AnnotationFence, fl.Status.Fence, rules.ReasonStaleFence, rules.ReasonNotHolder, rules.ReasonWriteNotPod)
	return err
}

// explainShard says who may write an object of a shard now: the owner of
// the shard's grant, as its Lease records it.
func explainShard(ctx context.Context, c client.Client, o options, out io.Writer, name, shard string) error {
	set := &fencingv1alpha1.FencedShardSet{}
	switch err := c.Get(ctx, types.NamespacedName{Namespace: o.namespace, Name: name}, set); {
	case apierrors.IsNotFound(err):
		_, err := fmt.Fprintf(out, "FencedShardSet %q does not exist in namespace %s: every write is denied (%s) until it does.\n", name, o.namespace, rules.ReasonLeaseNotFound)
		return err
	case err != nil:
		return fmt.Errorf("get FencedShardSet %s/%s: %w", o.namespace, name, err)
	}
	if !set.HasShard(shard) {
		_, err := fmt.Fprintf(out, "FencedShardSet %q has no shard %q: every write is denied (%s).\n", name, shard, rules.ReasonUnknownShard)
		return err
	}
	l := &coordinationv1.Lease{}
	lease := types.NamespacedName{Namespace: o.namespace, Name: record.ShardLeaseName(name, shard)}
	if err := c.Get(ctx, lease, l); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get Lease %s of shard %q: %w", lease, shard, err)
	}
	rec := record.ParseLease(l.Annotations)
	if !metav1.IsControlledBy(l, set) || !rec.Held() {
		_, err := fmt.Fprintf(out, "Shard %q has no owner now: every write is denied (%s) until a pod is granted it (kubectl fence shards %s).\n", shard, rules.ReasonNoHolder, name)
		return err
	}
	_, err := fmt.Fprintf(out, "Only pod %s, the shard's owner, may write it now, with the annotation %s: \"%d\"; writes with a lower fence are stale (%s), from other pods %s, from non-pods %s.\n",
		ptr.Deref(l.Spec.HolderIdentity, ""), fencingv1alpha1.AnnotationFence, rec.Fence, rules.ReasonStaleFence, rules.ReasonNotHolder, rules.ReasonWriteNotPod)
	return err
}
