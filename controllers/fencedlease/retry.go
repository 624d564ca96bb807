package fencedlease

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	// firstRetry is how soon to look again after another writer changed
	// the Lease or the FencedLease under us, or a cache was seen lagging
	// behind: usually the watch brings the newer object within a few
	// milliseconds.
	firstRetry = 10 * time.Millisecond
	// conflictRetry is the longest wait between such looks: the wait
	// doubles with every look in a row that finds the same.
	conflictRetry = 200 * time.Millisecond
	// errorRetryMax is the longest wait before a FencedLease whose
	// reconciles failed (the API server unreachable, replies lost) is
	// looked at again. controller-runtime's default doubles up to 16
	// minutes: after an outage of a minute, a FencedLease nothing else
	// wakes would wait about as long again before it is granted. Leases
	// last seconds; so does the longest wait.
	errorRetryMax = 5 * time.Second
)

// errorRateLimiter is the workqueue's retry after a failed reconcile: the
// wait doubles from 5 ms up to errorRetryMax for each FencedLease, and all
// retries together stay within controller-runtime's default of 10 a second
// (bursts of 100), so that an outage does not turn into a storm of requests.
func errorRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, errorRetryMax),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
