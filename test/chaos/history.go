//go:build chaos

package chaos

import (
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Outcome is how a write attempt ended, as its caller saw it.
type Outcome string

// Outcomes. Unknown is any error that does not prove the write was refused (a
// timeout, a connection lost mid-request): the API server may have applied it.
const (
	Accepted Outcome = "accepted"
	Rejected Outcome = "rejected"
	Unknown  Outcome = "unknown"
)

// Source is what the process believed when it wrote.
type Source string

// Sources of a write.
const (
	// SourceFresh: the process had just read its pod published as holder
	// with this fence.
	SourceFresh Source = "fresh"
	// SourceStale: the process read its fence, paused (a GC pause, a frozen
	// VM) without reading again, and writes with the fence it remembers.
	SourceStale Source = "stale"
	// SourceImpostor: a standby that copied the current fence from the
	// FencedLease's status: a fence is no secret, only the pod's identity
	// makes a writer the holder.
	SourceImpostor Source = "impostor"
)

// Attempt is one write to a protected object.
type Attempt struct {
	ID      int
	Process string
	Pod     string
	PodUID  types.UID
	Lease   string
	// Set is the FencedShardSet of a write to a shard's object, whose
	// Lease is then "<set>/<key>" (ShardName); "" for a FencedLease's.
	Set    string
	Object string
	Fence  int64
	Value  string
	Source Source
	// Call and Return are times since the start of the run, on the test's
	// monotonic clock.
	Call, Return time.Duration
	Outcome      Outcome
	// Reason is the webhook's reason of a rejection (parsed from the denial
	// message), or the kind of error that rejected or clouded it.
	Reason string
	Err    string
}

// Open is the end of a holding that had not ended when the run stopped.
const Open = time.Duration(math.MaxInt64)

// Via says where a holding was seen.
type Via string

// Where holdings are seen.
const (
	// ViaPod: the pod's annotations, as a watch of pods delivered them.
	ViaPod Via = "pod"
	// ViaRead: the holder process's own read of its pod (from its first to
	// its last read of that fence). A read happens before the watch event of
	// the same change may arrive, so it bounds the start of a publication
	// better than the watch.
	ViaRead Via = "read"
	// ViaStatus: the FencedLease's status, which the webhook trusts.
	ViaStatus Via = "status"
)

// Holding is a span of the run during which a pod held a fence of a lease, as
// seen Via one source.
type Holding struct {
	Lease    string
	Pod      string
	PodUID   types.UID
	Fence    int64
	From, To time.Duration
	Via      Via
}

// Version is one state of a protected object, as a watch delivered it: in the
// order the API server applied the writes.
type Version struct {
	Fence           int64
	Value           string
	ResourceVersion string
	At              time.Duration
}

// Read is the read of an object at the end of the run.
type Read struct {
	Object          string
	Fence           int64
	Value           string
	ResourceVersion string
	Call, Return    time.Duration
}

// Belief is a span during which a holder process of a renewal Holder lease
// believed, from its fence.Session, that it held a grant and could act on it:
// From is when HolderContext returned the grant (recorded after it
// returned, so no later than the process's first act under it); To is the
// earlier of when the process noticed the end (its holder context done,
// Current no longer the grant, its own release, the run stopping) and the
// latest Deadline the grant carried when the process last saw it valid: past
// that deadline Valid is false whatever the process does, so a process that
// stopped looking (paused) believes no longer than that.
type Belief struct {
	Lease    string
	Pod      string
	PodUID   types.UID
	Fence    int64
	From, To time.Duration
	// Why says what ended it: "lost", "deadline", "release", "stop".
	Why string
}

// ReleaseKind is which kind of release a holder process made.
type ReleaseKind string

// Kinds of release.
const (
	// ReleaseHeld: the process stopped its work and released the grant it
	// held (Session.Release).
	ReleaseHeld ReleaseKind = "release"
	// ReleaseEnded: the process noticed its grant end (revoked, expired,
	// moved on) and released it by fence (Session.ReleaseGrant): ending a
	// revoked grant early, a no-op for one that moved on.
	ReleaseEnded ReleaseKind = "release-ended"
	// ReleaseShort: Release with a client deadline of a few milliseconds;
	// its outcome may be unknown.
	ReleaseShort ReleaseKind = "release-short"
	// ReleaseLate: ReleaseGrant of an older fence of this pod after a newer
	// grant of the lease exists; it must change nothing.
	ReleaseLate ReleaseKind = "release-late"
)

// Outcomes of a release, as the process could tell them (the Session's log
// says whether it wrote the release).
const (
	ReleaseReleased = "released" // the release was written
	ReleaseNoop     = "no-op"    // nothing to release, or the grant had already ended (conflict)
	ReleaseUnknown  = "unknown"  // an error, maybe a timeout: it may have been written
	ReleaseChanged  = "changed"  // a late release ended a newer grant: a violation
)

// Release is one release call of a holder process.
type Release struct {
	ID      int
	Pod     string
	PodUID  types.UID
	Lease   string
	Kind    ReleaseKind
	Fence   int64
	Outcome string
	// Newer is the fence of the Lease when a late release was made.
	Newer        int64
	Call, Return time.Duration
	Err          string
}

// History is everything a run recorded, ready to be checked.
type History struct {
	Attempts []Attempt
	Holdings []Holding
	// Beliefs are the holder processes' beliefs of renewal Holder leases,
	// Releases their release calls.
	Beliefs  []Belief
	Releases []Release
	// Versions are the states of each object in apply order. Gaps names
	// the objects whose watch may have missed some ("*" for every object;
	// "pods" and "fencedleases" for those watches), for which completeness
	// cannot be checked.
	Versions map[string][]Version
	Gaps     map[string]bool
	// Final holds one read per object after every process stopped.
	Final []Read
	// End is a time after every recorded call returned: unknown outcomes
	// are taken to return then.
	End time.Duration
	// Faults counts the faults injected, by kind; FaultLog lists them, to
	// read a violation against what happened around it.
	Faults   map[string]int
	FaultLog []FaultEvent
	// StatusAttempts are the status writes that tried to change a protected
	// object's metadata (the status attack).
	StatusAttempts []StatusAttempt
}

// StatusAttempt is one status write of a protected object that tried to
// remove its label or move its stored fence ("unlabel", "move-fence"): all
// must be refused.
type StatusAttempt struct {
	Process, Lease string
	Fence          int64
	Source         Source
	Change         string
	Outcome        Outcome
	Reason         string
}

// FaultEvent is one injected fault: its kind, what it hit, when it began.
type FaultEvent struct {
	Kind, Target string
	At           time.Duration
}

// Recorder collects a history from many goroutines.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	h     History
	// open holdings by source and key; reads keeps the first and last read
	// of each fence by its holder process.
	open  map[Via]map[holdKey]*Holding
	reads map[holdKey]*Holding
}

type holdKey struct {
	lease string
	uid   types.UID
	fence int64
}

// NewRecorder starts the run's clock.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), h: History{Versions: map[string][]Version{}, Gaps: map[string]bool{}, Faults: map[string]int{}},
		open: map[Via]map[holdKey]*Holding{ViaPod: {}, ViaStatus: {}}, reads: map[holdKey]*Holding{}}
}

// Now is the time since the start of the run, on the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Since is t on the run's clock (t must carry a monotonic reading, as
// time.Now does and a deadline derived from it does).
func (r *Recorder) Since(t time.Time) time.Duration { return t.Sub(r.start) }

// Belief records a holder process's belief that ended.
func (r *Recorder) Belief(b Belief) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Beliefs = append(r.h.Beliefs, b)
}

// Release records a release call that returned.
func (r *Recorder) Release(rel Release) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rel.ID = len(r.h.Releases)
	r.h.Releases = append(r.h.Releases, rel)
}

// Attempt records a finished write and returns its ID.
func (r *Recorder) Attempt(a Attempt) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.ID = len(r.h.Attempts)
	r.h.Attempts = append(r.h.Attempts, a)
	return a.ID
}

// HolderRead records that a process read its pod published as holder of the
// lease with the fence, in a read between call and ret.
func (r *Recorder) HolderRead(lease, pod string, uid types.UID, fence int64, call, ret time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := holdKey{lease, uid, fence}
	if h := r.reads[k]; h != nil {
		h.From, h.To = min(h.From, call), max(h.To, ret)
		return
	}
	r.reads[k] = &Holding{Lease: lease, Pod: pod, PodUID: uid, Fence: fence, From: call, To: ret, Via: ViaRead}
}

// Hold records what a source shows a pod holding now: fence 0 (or an empty
// lease) means nothing. The holding it showed before, if another, ends now.
func (r *Recorder) Hold(via Via, pod string, uid types.UID, lease string, fence int64, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := r.open[via]
	for k, h := range byKey {
		if k.uid == uid && (k.lease != lease || k.fence != fence) {
			h.To = at
			r.h.Holdings = append(r.h.Holdings, *h)
			delete(byKey, k)
		}
	}
	if lease == "" || fence == 0 {
		return
	}
	k := holdKey{lease, uid, fence}
	if byKey[k] == nil {
		byKey[k] = &Holding{Lease: lease, Pod: pod, PodUID: uid, Fence: fence, From: at, To: Open, Via: via}
	}
}

// StatusHolder records the holder a FencedLease's status names now (uid ""
// for none); the one it named before, if another, ends now.
func (r *Recorder) StatusHolder(lease, pod string, uid types.UID, fence int64, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := r.open[ViaStatus]
	for k, h := range byKey {
		if k.lease == lease && (k.uid != uid || k.fence != fence) {
			h.To = at
			r.h.Holdings = append(r.h.Holdings, *h)
			delete(byKey, k)
		}
	}
	if uid == "" {
		return
	}
	k := holdKey{lease, uid, fence}
	if byKey[k] == nil {
		byKey[k] = &Holding{Lease: lease, Pod: pod, PodUID: uid, Fence: fence, From: at, To: Open, Via: ViaStatus}
	}
}

// Version records a state of an object delivered by its watch.
func (r *Recorder) Version(object string, v Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Versions[object] = append(r.h.Versions[object], v)
}

// Gap records that the watch of an object may have missed versions.
func (r *Recorder) Gap(object string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Gaps[object] = true
}

// LastVersion is the resourceVersion of the last version of the object
// its watch delivered.
func (r *Recorder) LastVersion(object string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs := r.h.Versions[object]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1].ResourceVersion
}

// Fault records an injected fault and what it hit.
func (r *Recorder) Fault(kind, target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults[kind]++
	r.h.FaultLog = append(r.h.FaultLog, FaultEvent{Kind: kind, Target: target, At: r.Now()})
}

// StatusAttempt records an attempt of the status attack.
func (r *Recorder) StatusAttempt(a StatusAttempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.StatusAttempts = append(r.h.StatusAttempts, a)
}

// Final records the read of an object at the end.
func (r *Recorder) Final(read Read) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Final = append(r.h.Final, read)
}

// History returns what was recorded; holdings still open stay Open. Call it
// once the run has stopped.
func (r *Recorder) History() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.End = r.Now()
	h.Attempts = append([]Attempt(nil), r.h.Attempts...)
	h.Holdings = append([]Holding(nil), r.h.Holdings...)
	h.FaultLog = append([]FaultEvent(nil), r.h.FaultLog...)
	h.Beliefs = append([]Belief(nil), r.h.Beliefs...)
	h.Releases = append([]Release(nil), r.h.Releases...)
	sort.SliceStable(h.Beliefs, func(i, j int) bool { return h.Beliefs[i].From < h.Beliefs[j].From })
	for _, byKey := range r.open {
		for _, o := range byKey {
			h.Holdings = append(h.Holdings, *o)
		}
	}
	for _, o := range r.reads {
		h.Holdings = append(h.Holdings, *o)
	}
	sort.SliceStable(h.Holdings, func(i, j int) bool { return h.Holdings[i].From < h.Holdings[j].From })
	return &h
}
