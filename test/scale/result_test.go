//go:build scale

package scale_test

import (
	"testing"

	"github.com/fencedlease/fencedlease/test/testenv"
)

// result is what TestScale writes to $SCALE_OUT.
type result struct {
	Leases       int          `json:"leases"`
	PodsPerLease int          `json:"pods_per_lease"`
	Namespaces   int          `json:"namespaces"`
	PodsCreated  float64      `json:"pods_created_s"`
	ColdStart    float64      `json:"cold_start_s"`
	ColdProgress []progress   `json:"cold_progress"`
	ColdQueue    queueLatency `json:"cold_queue"`
	// ColdHeld is how many were held and published when the cold start
	// ended (all, or how far it got); ColdRegrants the grants that changed
	// during it; WaitingForCapacity the FencedLeases waiting then for
	// their first grant because the operator was saturated.
	ColdHeld           int `json:"cold_held"`
	ColdRegrants       int `json:"cold_regrants"`
	WaitingForCapacity int `json:"waiting_for_capacity"`
	// ColdWritesPerGrant are the API server's write requests of the cold
	// start, by verb and resource, per FencedLease (all writes but the
	// test's creates of the FencedLeases; the heartbeat's among them).
	ColdWritesPerGrant map[string]float64 `json:"cold_writes_per_grant"`
	// ColdListsPerGrant are its LIST requests, likewise.
	ColdListsPerGrant map[string]float64 `json:"cold_lists_per_grant"`
	// Ceiling is the API server's rate for the writes of first grants in
	// this run, and ColdShare the cold start's share of it (1 would be as
	// fast as the API server takes the writes the operator makes).
	Ceiling   ceiling `json:"ceiling"`
	ColdShare float64 `json:"cold_share"`
	// ColdPace is what the operator's pace logged while the cold start ran:
	// each time first grants stopped or started being admitted, and why.
	ColdPace []string `json:"cold_pace,omitempty"`
	// ColdSeries is the cold start every SCALE_SERIES (10 s) and at its
	// end (series_test.go).
	ColdSeries []sample  `json:"cold_series,omitempty"`
	Steady     window    `json:"steady"`
	Restarts   []restart `json:"restarts"`
	ClientGo   clientGo  `json:"client_go"`
}

// progress is how many FencedLeases were held and published so long after
// the first was created.
type progress struct {
	Seconds float64 `json:"s"`
	Held    int     `json:"held"`
}

// window is what the operator did over a stretch of time.
type window struct {
	Seconds         float64      `json:"seconds"`
	Writes          int          `json:"lease_writes"`
	WritesPerSecond float64      `json:"lease_writes_per_s"`
	PerLease        float64      `json:"lease_writes_per_s_per_lease"`
	Regrants        int          `json:"regrants"`
	FencesChanged   int          `json:"fences_changed"`
	CPUPercent      float64      `json:"cpu_percent"`
	MaxRSSMiB       float64      `json:"max_rss_mib"`
	HeapInuseMiB    float64      `json:"heap_inuse_mib"`
	Queue           queueLatency `json:"queue"`
	// Heartbeats are the renewals of the operator's heartbeat, each a
	// renewal of every grant it vouches for (one Lease write each).
	Heartbeats float64 `json:"heartbeats"`
	// ControlPlane is what the kube-apiserver and etcd used meanwhile.
	ControlPlane controlPlaneUsage `json:"control_plane"`
}

// restart is an operator restart: until the new process renewed every
// Lease (with its heartbeat: renewed the heartbeat, which renews them all),
// then a window of steady state.
type restart struct {
	Cache      string  `json:"cache"`
	AllRenewed float64 `json:"all_renewed_s"`
	AllHeld    float64 `json:"all_held_s"`
	Regrants   int     `json:"regrants"`
	Window     window  `json:"window"`
}

// clientGo is the Lease writes of client-go elections.
type clientGo struct {
	Groups          int     `json:"groups"`
	Candidates      int     `json:"candidates"`
	Seconds         float64 `json:"seconds"`
	Writes          int     `json:"lease_writes"`
	WritesPerSecond float64 `json:"lease_writes_per_s"`
	PerGroup        float64 `json:"lease_writes_per_s_per_group"`
}

func writeResult(t *testing.T, r result) { testenv.WriteResult(t, "SCALE_OUT", r) }
