package fences3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	. "github.com/onsi/gomega"

	"github.com/fencedlease/fencedlease/pkg/fence/fences3"
)

const key = "reports/monthly"

func body(s string) io.ReadSeeker { return strings.NewReader(s) }

// read returns the current content and pointer of key.
func read(g Gomega, st *fences3.Store) (string, fences3.Pointer) {
	p, rc, err := st.Get(context.Background(), key)
	g.Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	data, err := io.ReadAll(rc)
	g.Expect(err).NotTo(HaveOccurred())
	return string(data), p
}

// versions lists the version objects of key.
func versions(g Gomega, bucket string) []string {
	out, err := srv.Client("").ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(key + ".versions/")})
	g.Expect(err).NotTo(HaveOccurred())
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// TestStaleHolder is the seeds' scenario: A writes with fence 41 and
// pauses; B is granted 42 and writes the report; A resumes and writes with
// 41. A's write is rejected with ErrStale and readers still get B's report.
func TestStaleHolder(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	bucket := newBucket(t)
	st := fences3.New(srv.Client(""), bucket)

	_, err := st.Put(ctx, key, "A-1", 41, body("report by A"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.Put(ctx, key, "B-1", 42, body("report by B"))
	g.Expect(err).NotTo(HaveOccurred())

	_, err = st.Put(ctx, key, "A-2", 41, body("late report by A"))
	g.Expect(err).To(MatchError(`put ` + bucket + `/reports/monthly with fence 41 as operation "A-2": ` +
		`stale fence: a newer holder has written the object (pointer fence 42, by operation "B-1")`))
	g.Expect(errors.Is(err, fences3.ErrStale)).To(BeTrue())
	content, p := read(g, st)
	g.Expect(content).To(Equal("report by B"))
	g.Expect(p.Fence).To(Equal(int64(42)))
	g.Expect(p.Seq).To(Equal(int64(2)))
	g.Expect(p.Version).To(Equal(fences3.VersionKey(key, "B-1", 42)))
	// The stale write left no version behind: it was refused before.
	g.Expect(versions(g, bucket)).To(ConsistOf(fences3.VersionKey(key, "A-1", 41), fences3.VersionKey(key, "B-1", 42)))
}

// TestSameFenceWritesAgain: the holder may write the object several times
// with its fence (stored fence <= caller's, as fencesql).
func TestSameFenceWritesAgain(t *testing.T) {
	g := NewWithT(t)
	st := fences3.New(srv.Client(""), newBucket(t))
	for i := range 3 {
		_, err := st.Put(context.Background(), key, fmt.Sprint("op-", i), 42, body(fmt.Sprint("v", i)))
		g.Expect(err).NotTo(HaveOccurred())
	}
	content, p := read(g, st)
	g.Expect(content).To(Equal("v2"))
	g.Expect(p).To(Equal(fences3.Pointer{Fence: 42, Version: fences3.VersionKey(key, "op-2", 42), OpID: "op-2", Seq: 3, Recent: []string{"op-1", "op-0"}, RecentFences: []int64{42, 42}}))
}

// TestReplayIsANoOp: a retried operation returns ErrAlreadyApplied, writes
// no second version and does not undo a later write, even with a fence that
// is stale by now.
func TestReplayIsANoOp(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	bucket := newBucket(t)
	st := fences3.New(srv.Client(""), bucket)
	_, err := st.Put(ctx, key, "op-1", 41, body("one"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.Put(ctx, key, "op-2", 42, body("two"))
	g.Expect(err).NotTo(HaveOccurred())

	for f, why := range map[int64]string{41: "", 42: " (with fence 41)"} {
		_, err = st.Put(ctx, key, "op-1", f, body("one"))
		g.Expect(err).To(MatchError(fmt.Sprintf(`put %s/reports/monthly with fence %d as operation "op-1": operation already applied%s`, bucket, f, why)))
		g.Expect(errors.Is(err, fences3.ErrAlreadyApplied)).To(BeTrue())
	}
	content, p := read(g, st)
	g.Expect(content).To(Equal("two"))
	g.Expect(p.Seq).To(Equal(int64(2)))
	g.Expect(versions(g, bucket)).To(HaveLen(2))
}

// TestBadInput: an empty key or operation ID and a fence that is not a
// positive int64 are refused before anything is written.
func TestBadInput(t *testing.T) {
	g := NewWithT(t)
	bucket := newBucket(t)
	st := fences3.New(srv.Client(""), bucket)
	_, err := st.Put(context.Background(), key, "op", 0, body("x"))
	g.Expect(err).To(MatchError(`put reports/monthly: invalid fence "0": must be positive`))
	_, err = st.Put(context.Background(), key, "op", -4, body("x"))
	g.Expect(err).To(MatchError(`put reports/monthly: invalid fence "-4": sign not allowed`))
	_, err = st.Put(context.Background(), key, "", 4, body("x"))
	g.Expect(err).To(MatchError(`put "reports/monthly" as operation "": key and operation ID must not be empty`))
	_, err = st.Current(context.Background(), key)
	g.Expect(errors.Is(err, fences3.ErrNotFound)).To(BeTrue())
	g.Expect(versions(g, bucket)).To(BeEmpty())
}

// TestOperationReused: one operation ID for two different contents is an
// error, not a silent no-op.
func TestOperationReused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	bucket := newBucket(t)
	st := fences3.New(srv.Client(""), bucket)
	// A version of op-1 exists (an earlier attempt that crashed before it
	// moved the pointer), with other content.
	_, err := srv.Client("").PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(fences3.VersionKey(key, "op-1", 42)),
		Body: bytes.NewReader([]byte("other")), Metadata: map[string]string{fences3.MetaOpID: "op-1", fences3.MetaSHA256: "0"}})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.Put(ctx, key, "op-1", 42, body("mine"))
	g.Expect(errors.Is(err, fences3.ErrOperationReused)).To(BeTrue(), "err: %v", err)
	_, err = st.Current(ctx, key)
	g.Expect(errors.Is(err, fences3.ErrNotFound)).To(BeTrue())
}

// TestMalformedPointer: a pointer this package did not write is reported,
// never overwritten.
func TestMalformedPointer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	bucket := newBucket(t)
	_, err := srv.Client("").PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("plain data"))})
	g.Expect(err).NotTo(HaveOccurred())
	st := fences3.New(srv.Client(""), bucket)
	_, err = st.Put(ctx, key, "op", 42, body("x"))
	g.Expect(errors.Is(err, fences3.ErrMalformedPointer)).To(BeTrue(), "err: %v", err)
	_, err = st.Current(ctx, key)
	g.Expect(errors.Is(err, fences3.ErrMalformedPointer)).To(BeTrue(), "err: %v", err)
}

// isPut matches the PUT of a key (path-style: /bucket/key).
func isPut(bucket, k string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == http.MethodPut && r.URL.Path == "/"+bucket+"/"+k }
}

// TestLostReply loses the reply to a write through a proxy that forwards
// the request and then drops the answer: the write was applied, the client
// cannot know. Put settles it by reading back: exactly one version object,
// the pointer moved exactly once, and Put reports success. The same with
// the reply to the version write lost, with both, and with a lost request
// (not applied: read back, then written again) before a lost reply.
func TestLostReply(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pointer, vers int
		lostRequests  int
	}{
		{name: "pointer", pointer: 1},
		{name: "version", vers: 1},
		{name: "both", pointer: 1, vers: 1},
		{name: "lost requests, then lost replies", pointer: 1, vers: 1, lostRequests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			px := newProxied(t)
			bucket, proxy, st := px.bucket, px.proxy, px.slow
			_, err := st.Put(ctx, key, "op-1", 41, body("first"))
			g.Expect(err).NotTo(HaveOccurred())

			proxy.DropRequestNext(tc.lostRequests, isPut(bucket, key))
			proxy.DropRequestNext(tc.lostRequests, isPut(bucket, fences3.VersionKey(key, "op-2", 42)))
			proxy.DropNext(tc.pointer, isPut(bucket, key))
			proxy.DropNext(tc.vers, isPut(bucket, fences3.VersionKey(key, "op-2", 42)))
			p, err := st.Put(ctx, key, "op-2", 42, body("second"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(proxy.Dropped()).To(HaveLen(tc.pointer+tc.vers+2*tc.lostRequests), "the replies were really lost")
			g.Expect(p.Seq).To(Equal(int64(2)))

			content, cur := read(g, st)
			g.Expect(content).To(Equal("second"))
			g.Expect(cur).To(Equal(fences3.Pointer{Fence: 42, Version: fences3.VersionKey(key, "op-2", 42), OpID: "op-2", Seq: 2, Recent: []string{"op-1"}, RecentFences: []int64{41}}))
			g.Expect(versions(g, bucket)).To(ConsistOf(fences3.VersionKey(key, "op-1", 41), fences3.VersionKey(key, "op-2", 42)), "no duplicate version")

			// Replaying the operation afterwards is a no-op.
			_, err = st.Put(ctx, key, "op-2", 42, body("second"))
			g.Expect(errors.Is(err, fences3.ErrAlreadyApplied)).To(BeTrue(), "err: %v", err)
		})
	}
}

// TestLostReplyUnsettled: when the reply is lost and the store cannot be
// read back either, the outcome is reported as unknown (never as failure or
// success), and a replay with the same operation ID settles it without a
// second application.
func TestLostReplyUnsettled(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	px := newProxied(t)
	bucket, proxy, st, direct := px.bucket, px.proxy, px.slow, px.direct
	// The pointer write's reply is lost, and so is every read after it.
	var lost atomic.Bool
	proxy.DropNext(1, func(r *http.Request) bool {
		if isPut(bucket, key)(r) {
			lost.Store(true)
			return true
		}
		return false
	})
	proxy.DropNext(100, func(r *http.Request) bool { return r.Method == http.MethodGet && lost.Load() })
	_, err := st.Put(ctx, key, "op-1", 42, body("report"))
	g.Expect(errors.Is(err, fences3.ErrUnknownOutcome)).To(BeTrue(), "err: %v", err)

	// It was applied; a replay through a working path says so.
	_, err = direct.Put(ctx, key, "op-1", 42, body("report"))
	g.Expect(errors.Is(err, fences3.ErrAlreadyApplied)).To(BeTrue(), "err: %v", err)
	content, p := read(g, direct)
	g.Expect(content).To(Equal("report"))
	g.Expect(p.Seq).To(Equal(int64(1)))
}

// TestConcurrentFences: writers with fences 1..8 race, several writes each;
// of their writes, the accepted ones in the order the pointer took them
// never go back in fence, and the pointer ends at the highest fence that
// wrote. The pointer's own sequence numbers give that order.
func TestConcurrentFences(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	bucket := newBucket(t)
	st := fences3.New(srv.Client(""), bucket)
	type accepted struct{ seq, fence int64 }
	var mu sync.Mutex
	var got []accepted
	var wg sync.WaitGroup
	for f := int64(1); f <= 8; f++ {
		wg.Go(func() {
			for i := range 5 {
				p, err := st.Put(ctx, key, fmt.Sprintf("w%d-%d", f, i), f, body(fmt.Sprintf("%d/%d", f, i)))
				switch {
				case err == nil:
					mu.Lock()
					got = append(got, accepted{p.Seq, p.Fence})
					mu.Unlock()
				case errors.Is(err, fences3.ErrStale):
				default:
					t.Errorf("writer %d: %v", f, err)
				}
			}
		})
	}
	wg.Wait()
	byseq := map[int64]int64{}
	for _, a := range got {
		g.Expect(byseq).NotTo(HaveKey(a.seq), "two writes took sequence number %d", a.seq)
		byseq[a.seq] = a.fence
	}
	_, cur := read(g, st)
	g.Expect(int64(len(byseq))).To(Equal(cur.Seq), "every move of the pointer is an accepted write")
	for seq := int64(2); seq <= cur.Seq; seq++ {
		g.Expect(byseq[seq]).To(BeNumerically(">=", byseq[seq-1]), "fence went back at move %d", seq)
	}
	g.Expect(cur.Fence).To(Equal(int64(8)), "the highest fence wrote last")
}
