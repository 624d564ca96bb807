package fencedcontroller

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencedlease/fencedlease/internal/fieldmanager"
	"github.com/fencedlease/fencedlease/pkg/fence"
)

// LabelProtectedBy is the label of a protected object: the name of the
// FencedLease whose holder alone may write it. The fencing webhook checks
// a fence on such objects only, so the client stamps its fence on writes
// of objects that carry it, and on no others (see NewClient).
const LabelProtectedBy = "fencedlease.io/protected-by"

// protected says whether an object, as the caller gave it to the client,
// carries the protected-by label.
func protected(labels map[string]string) bool {
	_, ok := labels[LabelProtectedBy]
	return ok
}

// The denials of the fencing webhook that the client answers by writing
// its fence, recognised by the webhook's name and the words of the reason
// (the webhook's messages are formatted in internal/fencing;
// TestDenialsAreRecognised holds the two in line). Nothing else is
// retried: every other denial is the answer.
var (
	// deniedMissingFence: a write of a protected object without a fence
	// (reason missing_fence), a subresource write's included (its message
	// then goes on to say that the fence goes in the field manager).
	deniedMissingFence = regexp.MustCompile(`^admission webhook "protected\.fencedlease\.io" denied the request: .*: no fencedlease\.io/fence annotation: `)
	// deniedStale: a write with an older fence than the FencedLease's
	// (reason stale_fence); the two fences are its submatches.
	deniedStale = regexp.MustCompile(`^admission webhook "protected\.fencedlease\.io" denied the request: .*: write with fence (\d+) rejected: stale holder: FencedLease "[^"]*" is at fence (\d+)$`)
	// deniedOlderWrite: a delete by the holder pod of an object that does
	// not carry the current fence (reason delete_older_write); the current
	// fence is its submatch.
	deniedOlderWrite = regexp.MustCompile(`^admission webhook "protected\.fencedlease\.io" denied the request: .*: delete rejected: the object (?:was last written with fence \d+|carries no fence), not with the current fence (\d+) of FencedLease "[^"]*": the holder deletes only what carries its current fence`)
)

// webhookMessage is the message of the API server's answer, if err is a
// refusal (403 Forbidden) of an admission webhook.
func webhookMessage(err error) (string, bool) {
	var status apierrors.APIStatus
	if err == nil || !apierrors.IsForbidden(err) || !errors.As(err, &status) {
		return "", false
	}
	return status.Status().Message, true
}

// unstamped says whether err is the fencing webhook's refusal of a write
// that the client sent without its fence, for that alone, while it holds
// the grant with fence current: the write carried no fence (missing_fence),
// or only the one the stored object carried over into it, older than
// current, while the FencedLease is at current (stale_fence). Sent with
// its fence, the write is decided on its own. A refusal that names a newer
// grant than current, or anything else, is the answer.
func unstamped(err error, current int64) bool {
	msg, ok := webhookMessage(err)
	if !ok {
		return false
	}
	if deniedMissingFence.MatchString(msg) {
		return true
	}
	m := deniedStale.FindStringSubmatch(msg)
	return m != nil && parseFence(m[1]) < current && parseFence(m[2]) == current
}

// olderWrite says whether err is the fencing webhook's refusal of a delete
// by the holder pod of an object not last written with the current fence,
// while that fence is current, the fence of the grant the client holds
// (delete_older_write): the client writes its fence on the object, then
// deletes that version.
func olderWrite(err error, current int64) bool {
	msg, ok := webhookMessage(err)
	if !ok {
		return false
	}
	m := deniedOlderWrite.FindStringSubmatch(msg)
	return m != nil && parseFence(m[1]) == current
}

func parseFence(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// fenceAnnotationField is how a server-side apply conflict names the
// fence annotation.
const fenceAnnotationField = ".metadata.annotations." + fence.Annotation

// ownConflict says whether err is a server-side apply conflict whose every
// cause is a field this client owns under another grant, which the apply
// may take over (force): the fence annotation, written by whoever held
// the grant before, and which the webhook requires this write to change;
// or a field owned by base, the field manager of this write without its
// fence, under another fence (a subresource apply carries the fence in
// its field manager, so each grant is a new manager of the same fields).
// A conflict with anything else is the caller's to resolve.
func ownConflict(err error, base string, current int64) bool {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	if d == nil || len(d.Causes) == 0 {
		return false
	}
	for _, c := range d.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			return false
		}
		if c.Field == fenceAnnotationField {
			continue
		}
		m, ok := conflictManager(c.Message)
		if !ok || !ownedUnderAnotherFence(m, base, current) {
			return false
		}
	}
	return true
}

// conflictManager is the field manager a conflict cause names:
// `conflict with "<manager>"`, followed by its subresource, API version
// and time.
func conflictManager(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "conflict with ")
	if !ok {
		return "", false
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", false
	}
	m, err := strconv.Unquote(q)
	return m, err == nil
}

// ownedUnderAnotherFence says whether manager is base with a fence other
// than current.
func ownedUnderAnotherFence(manager, base string, current int64) bool {
	b, n, err := fieldmanager.Parse(manager)
	return err == nil && b == base && n != current
}
