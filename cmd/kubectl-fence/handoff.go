package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// handoff asks the operator to hand the grant of a FencedLease over to
// another eligible candidate: it sets fencedlease.io/handoff-requested-at to
// the time of the request, waits until the operator has handled it (the
// status records the request), and reports what came of it.
func handoff(ctx context.Context, o options, out io.Writer) error {
	if len(o.args) != 1 {
		return fmt.Errorf("handoff takes one FencedLease name, got %d", len(o.args))
	}
	c, err := o.connect()
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: o.namespace, Name: o.args[0]}
	fl := &fencingv1alpha1.FencedLease{}
	if err := c.Get(ctx, key, fl); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("FencedLease %s not found", key)
		}
		return fmt.Errorf("get FencedLease %s: %w", key, err)
	}
	if fl.Status.Holder == nil {
		return fmt.Errorf("FencedLease %s has no holder: nothing to hand off", key)
	}
	from, fromFence := fl.Status.Holder.PodName, fl.Status.Fence
	request := o.now().UTC().Format(time.RFC3339Nano)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		fencingv1alpha1.AnnotationHandoffRequestedAt: request}}})
	if err := c.Patch(ctx, fl, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("request the handoff of FencedLease %s: %w", key, err)
	}
	fmt.Fprintf(out, "Requested a handoff of FencedLease %s from pod %s (fence %d) at %s\n", key, from, fromFence, request)

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := poll(ctx, func() (bool, error) {
		if err := c.Get(ctx, key, fl); err != nil {
			return false, err
		}
		return fl.Status.LastHandledHandoffAt == request, nil
	}); err != nil {
		return fmt.Errorf("the operator has not handled the request within %s (is it running?): %w", o.timeout, err)
	}
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, lease); err != nil {
		return fmt.Errorf("get Lease %s: %w", key, err)
	}
	if lease.Annotations[fencingv1alpha1.LeaseAnnotationHandoff] != request {
		if note := refusal(ctx, c, key, request); note != "" {
			return fmt.Errorf("handoff refused: %s", note)
		}
		fmt.Fprintf(out, "The grant of pod %s was ending anyway (see kubectl describe fl -n %s %s)\n", from, key.Namespace, key.Name)
		return nil
	}
	if fl.Spec.Takeover == fencingv1alpha1.TakeoverImmediate {
		fmt.Fprintf(out, "Handoff started: pod %s's grant ends and another candidate is granted at once (takeover Immediate)\n", from)
	} else {
		fmt.Fprintf(out, "Handoff started: pod %s's grant is revoked; the next holder is granted once it expires (takeover Safe, %s)\n",
			from, expiresIn(fl, lease, o.now()))
	}
	if !o.wait {
		return nil
	}
	if err := poll(ctx, func() (bool, error) {
		if err := c.Get(ctx, key, fl); err != nil {
			return false, err
		}
		return fl.Status.Holder != nil && fl.Status.Fence > fromFence, nil
	}); err != nil {
		return fmt.Errorf("no new holder within %s: %w", o.timeout, err)
	}
	_, err = fmt.Fprintf(out, "Pod %s holds FencedLease %s with fence %d (was pod %s, fence %d)\n", fl.Status.Holder.PodName, key, fl.Status.Fence, from, fromFence)
	return err
}

// refusal finds the Event in which the operator refused the request. Events
// are written a moment after the status, so it looks for a few seconds.
func refusal(ctx context.Context, c client.Client, key types.NamespacedName, request string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	note := ""
	_ = poll(ctx, func() (bool, error) {
		var list eventsv1.EventList
		if err := c.List(ctx, &list, client.InNamespace(key.Namespace)); err != nil {
			return false, nil //nolint:nilerr // look again until the deadline
		}
		for _, e := range list.Items {
			if e.Reason == fencingv1alpha1.EventHandoffRefused && e.Regarding.Name == key.Name && strings.Contains(e.Note, request) {
				note = e.Note
				return true, nil
			}
		}
		return false, nil
	})
	return note
}

// poll checks cond every 200ms until it holds or ctx ends.
func poll(ctx context.Context, cond func() (bool, error)) error {
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) { return cond() })
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("timed out")
	}
	return err
}
