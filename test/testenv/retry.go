package testenv

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Transient says whether an error is one that a request may meet while the
// control plane fails over, and that says nothing about the request itself:
// the connection refused, reset or ended under it (an API server stopped,
// crashed or cut off), or the API server unable to answer for now (not
// ready yet, its etcd leader changing, a timeout). The request may or may
// not have been applied.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"http2: client connection lost", "http2: server sent GOAWAY", "use of closed network connection",
		"not yet ready to handle request", "etcdserver: ", "connection refused", "connection reset", "broken pipe"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// RetryTransient wraps an administrator's client for a test harness that
// drives a control plane while it fails over (test/cluster's HA faults):
// each request that meets a Transient error is sent again, for up to a
// minute. A create whose retry finds the object already there, and a delete
// whose retry finds it gone, were applied the first time and succeed, unless
// the object found is being deleted: that is an older one of the name (a
// harness re-creating an object waits for it to go), and the create's
// AlreadyExists is its answer. Any other answer to a retry is the request's
// answer (an update applied the first time conflicts on its retry). The operator and the workloads under
// test never use it: they must cope on their own.
func RetryTransient(c client.Client) client.Client {
	return Intercept(c, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return retryTransient(ctx, func() error { return cl.Get(ctx, key, obj, opts...) })
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return retryTransient(ctx, func() error { return cl.List(ctx, list, opts...) })
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			retried := false
			return retryTransient(ctx, func() error {
				err := cl.Create(ctx, obj, opts...)
				if retried && apierrors.IsAlreadyExists(err) {
					return createdBefore(ctx, cl, obj, err)
				}
				retried = true
				return err
			})
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			retried := false
			return retryTransient(ctx, func() error {
				err := cl.Delete(ctx, obj, opts...)
				if retried && apierrors.IsNotFound(err) {
					return nil
				}
				retried = true
				return err
			})
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return retryTransient(ctx, func() error { return cl.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return retryTransient(ctx, func() error { return cl.Patch(ctx, obj, patch, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return retryTransient(ctx, func() error { return cl.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return retryTransient(ctx, func() error { return cl.SubResource(sub).Patch(ctx, obj, patch, opts...) })
		},
		SubResourceCreate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			return retryTransient(ctx, func() error { return cl.SubResource(sub).Create(ctx, obj, subObj, opts...) })
		},
	})
}

// createdBefore reads the object that a retried create found already there
// into obj. One being deleted is not what the first attempt created: the
// retry's AlreadyExists, exists, is then the answer.
func createdBefore(ctx context.Context, cl client.Client, obj client.Object, exists error) error {
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	if obj.GetDeletionTimestamp() != nil {
		return exists
	}
	return nil
}

// retryTransient runs f until it meets no Transient error, for up to a minute.
func retryTransient(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(time.Minute)
	wait := 50 * time.Millisecond
	for {
		err := f()
		if !Transient(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
