package main

import (
	"errors"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// Outcomes of a write, as logged.
const (
	// Accepted: the API server stored it.
	Accepted = "accepted"
	// Refused: the fencing client did not send it: no valid grant.
	Refused = "refused"
	// Rejected: an admission webhook denied it.
	Rejected = "rejected"
	// Conflict: the object changed since it was read.
	Conflict = "conflict"
	// Failed: anything else.
	Failed = "error"
)

// outcome classifies the result of a write.
func outcome(err error) string {
	switch {
	case err == nil:
		return Accepted
	case errors.Is(err, fence.ErrNotHolder):
		return Refused
	case apierrors.IsConflict(err):
		return Conflict
	case strings.Contains(err.Error(), "admission webhook"):
		return Rejected
	}
	return Failed
}

// logWrite logs one write: part is spec or status, verb update or patch,
// late whether it is a write of --late-writes.
func logWrite(log logr.Logger, obj client.Object, part, verb string, fenceValue int64, late bool, sent time.Time, err error) {
	kv := []any{"widget", klog.KObj(obj), "part", part, "verb", verb, "result", outcome(err), "fence", fenceValue,
		"late", late, "sent", sent.UTC().Format(time.RFC3339Nano), "done", time.Now().UTC().Format(time.RFC3339Nano)}
	if err != nil {
		kv = append(kv, "error", err.Error())
	}
	log.Info("Write", kv...)
}
