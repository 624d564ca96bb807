package fences3

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// write is one Put: the version object first, then the pointer.
type write struct {
	s       *Store
	key     string
	opID    string
	fence   int64
	body    io.ReadSeeker
	version string
	sha     string
}

func (w *write) attempts() int {
	if w.s.Attempts > 0 {
		return w.s.Attempts
	}
	return DefaultAttempts
}

func (w *write) run(ctx context.Context) (Pointer, error) {
	cur, etag, err := w.s.readPointer(ctx, w.key)
	if err != nil {
		return Pointer{}, err
	}
	// A replay, or a stale writer, changes nothing, not even a version.
	if err := w.check(cur); err != nil {
		return Pointer{}, err
	}
	if w.sha, err = digest(w.body); err != nil {
		return Pointer{}, fmt.Errorf("read body: %w", err)
	}
	var baseSeq int64
	if cur != nil {
		baseSeq = cur.Seq
		if err := w.checkEarlierAttempts(ctx, cur); err != nil {
			return Pointer{}, err
		}
	}
	if err := w.putVersion(ctx, baseSeq); err != nil {
		return Pointer{}, err
	}
	for range w.attempts() {
		base := Pointer{}
		if cur != nil {
			base = *cur
		}
		next := base.next(w.fence, w.version, w.opID)
		err := w.s.putPointer(ctx, w.key, etag, next)
		switch classify(err) {
		case applied:
			return next, nil
		case refused:
			return Pointer{}, fmt.Errorf("move pointer: %w", err)
		case lostRace:
			// Another writer moved it: decide again on what it wrote.
		case unknown:
			// The reply was lost: read back, never resend blindly.
			now, nowTag, rerr := w.s.readPointer(ctx, w.key)
			if rerr != nil {
				return Pointer{}, fmt.Errorf("%w: move pointer: %w; read back: %w", ErrUnknownOutcome, err, rerr)
			}
			switch {
			case now != nil && now.applied(w.opID, w.fence):
				return next, nil
			case now != nil && !now.remembers(next.Seq):
				return Pointer{}, fmt.Errorf("%w: move pointer: %w; %d other writes moved it since", ErrUnknownOutcome, err, now.Seq-base.Seq)
			}
			// Not applied: the pointer is unchanged, or others moved it and
			// it would still list this operation.
			cur, etag = now, nowTag
			if err := w.check(cur); err != nil {
				return Pointer{}, err
			}
			continue
		}
		if cur, etag, err = w.s.readPointer(ctx, w.key); err != nil {
			return Pointer{}, err
		}
		if err := w.check(cur); err != nil {
			return Pointer{}, err
		}
	}
	return Pointer{}, fmt.Errorf("%w (%d attempts)", ErrContention, w.attempts())
}

// check decides on the current pointer: a replay or a stale fence ends
// the write. An operation is applied once, under whichever fence, as with
// fencesql's operations table; but a writer whose own fence is lower than
// the pointer's is told that it is stale, even when a newer holder applied
// the same operation: its attempt lost, and the newer holder's content is
// current.
func (w *write) check(cur *Pointer) error {
	if cur == nil {
		return nil
	}
	f, applied := cur.appliedAt(w.opID)
	switch {
	case applied && (f == w.fence || f == 0):
		return ErrAlreadyApplied
	case cur.Fence > w.fence:
		return fmt.Errorf("%w (pointer fence %d, by operation %q)", ErrStale, cur.Fence, cur.OpID)
	case applied:
		return fmt.Errorf("%w (with fence %d)", ErrAlreadyApplied, f)
	}
	return nil
}

// checkEarlierAttempts refuses a write of an operation that an earlier
// attempt, under any fence, may have applied beyond what the pointer cur
// remembers (cur does not list the operation: check said so). A replay
// after a new grant has another fence, so its own version key tells
// nothing of the old grant's attempt: the versions of the operation are
// listed. When cur remembers every move it ever made, an earlier attempt's
// move would be listed, and nothing is read.
func (w *write) checkEarlierAttempts(ctx context.Context, cur *Pointer) error {
	if cur.remembers(1) {
		return nil
	}
	prefix := versionPrefix(w.key, w.opID)
	out, err := w.s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(w.s.bucket), Prefix: aws.String(prefix)})
	if err != nil {
		return fmt.Errorf("list the earlier attempts of the operation: %w", err)
	}
	for _, o := range out.Contents {
		k := aws.ToString(o.Key)
		head, err := w.s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.s.bucket), Key: aws.String(k)})
		if statusOf(err) == 404 {
			continue // expired by a lifecycle rule meanwhile
		}
		if err != nil {
			return fmt.Errorf("read earlier attempt %s: %w", k, err)
		}
		if head.Metadata[MetaOpID] != w.opID {
			continue
		}
		since, _ := strconv.ParseInt(head.Metadata[MetaBaseSeq], 10, 64)
		if !cur.remembers(since + 1) {
			return fmt.Errorf("version %s was written by an earlier attempt after move %d of the pointer, which remembers only moves %d to %d: %w",
				k, since, cur.Seq-RecentOps, cur.Seq, ErrOutcomeLost)
		}
	}
	return nil
}

// putVersion writes the immutable version object, once: if an earlier
// attempt of this operation under this fence wrote it, that one is kept
// (checkEarlierAttempts has made sure that it did not move the pointer).
// The version records baseSeq, the move of the pointer read before it.
func (w *write) putVersion(ctx context.Context, baseSeq int64) error {
	for range w.attempts() {
		if _, err := w.body.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewind body: %w", err)
		}
		_, err := w.s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(w.s.bucket), Key: aws.String(w.version), Body: w.body, IfNoneMatch: aws.String("*"),
			Metadata: map[string]string{MetaFence: strconv.FormatInt(w.fence, 10), MetaOpID: w.opID, MetaSHA256: w.sha,
				MetaBaseSeq: strconv.FormatInt(baseSeq, 10)},
		}, noRetry)
		switch classify(err) {
		case applied:
			return nil
		case refused:
			return fmt.Errorf("write version %s: %w", w.version, err)
		}
		// It exists (412), or the reply was lost: is it this operation's?
		mine, found, herr := w.versionIsMine(ctx)
		switch {
		case herr != nil:
			return fmt.Errorf("%w: write version %s: %w; read back: %w", ErrUnknownOutcome, w.version, err, herr)
		case found && mine:
			return nil
		case found:
			return fmt.Errorf("version %s: %w", w.version, ErrOperationReused)
		}
		// Absent: the lost write did not apply; write it again.
	}
	return fmt.Errorf("%w: write version %s: no attempt was acknowledged", ErrUnknownOutcome, w.version)
}

// versionIsMine reads back the version object: whether it exists and was
// written by this operation with this content.
func (w *write) versionIsMine(ctx context.Context) (mine, found bool, err error) {
	out, err := w.s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.s.bucket), Key: aws.String(w.version)})
	if err != nil {
		if statusOf(err) == 404 {
			return false, false, nil
		}
		return false, false, err
	}
	return out.Metadata[MetaOpID] == w.opID && out.Metadata[MetaSHA256] == w.sha, true, nil
}
