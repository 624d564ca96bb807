package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The etcd operations of an HA cluster, done the way an operator of a real
// control plane does them: with etcdctl against the running members and
// etcdutl on the data directories (docs/operations.md, "Restoring etcd").

// run runs one of the etcd tools of K8sBin and returns its standard output;
// an error carries its standard error.
func (c *Cluster) runTool(ctx context.Context, tool string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.K8sBin, tool), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// MemberStatus is what etcdctl endpoint status says of one member.
type MemberStatus struct {
	// Index is the member's place in the cluster (etcd-<Index>).
	Index int
	// ID is the member's ID, Leader the ID of the member it follows.
	ID, Leader uint64
	// Revision is the store's revision as the member has applied it.
	Revision int64
	RaftTerm uint64
}

// statusJSON is etcdctl endpoint status -w json, one entry per endpoint.
type statusJSON []struct {
	Endpoint string `json:"Endpoint"`
	Status   struct {
		Header struct {
			MemberID uint64 `json:"member_id"`
			Revision int64  `json:"revision"`
			RaftTerm uint64 `json:"raft_term"`
		} `json:"header"`
		Leader uint64 `json:"leader"`
	} `json:"Status"`
}

// EtcdStatus asks each running member for its status; a member that does not
// answer is left out.
func (c *Cluster) EtcdStatus(ctx context.Context) ([]MemberStatus, error) {
	if err := c.requireHA(); err != nil {
		return nil, err
	}
	var out []MemberStatus
	var errs []string
	for i, m := range c.ha.members {
		if !c.EtcdMemberRunning(i) {
			continue
		}
		b, err := c.runTool(ctx, etcdctl, "--endpoints="+m.client, "--command-timeout=3s", "endpoint", "status", "-w", "json")
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		var st statusJSON
		if err := json.Unmarshal(b, &st); err != nil || len(st) != 1 {
			errs = append(errs, fmt.Sprintf("etcdctl endpoint status of %s: cannot read %q: %v", m.name, b, err))
			continue
		}
		s := st[0].Status
		out = append(out, MemberStatus{Index: i, ID: s.Header.MemberID, Leader: s.Leader, Revision: s.Header.Revision, RaftTerm: s.Header.RaftTerm})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no etcd member answers: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// EtcdLeader returns the index of the member that leads now, as the members
// that answer agree.
func (c *Cluster) EtcdLeader(ctx context.Context) (int, []MemberStatus, error) {
	st, err := c.EtcdStatus(ctx)
	if err != nil {
		return -1, nil, err
	}
	for _, s := range st {
		if s.ID == s.Leader {
			return s.Index, st, nil
		}
	}
	return -1, st, fmt.Errorf("no etcd member leads now")
}

// MoveEtcdLeader hands the leadership to member to, with etcdctl
// move-leader (sent to the current leader, found among the endpoints). It
// returns the index of the member that led before.
func (c *Cluster) MoveEtcdLeader(ctx context.Context, to int) (int, error) {
	from, st, err := c.EtcdLeader(ctx)
	if err != nil {
		return -1, err
	}
	var target uint64
	for _, s := range st {
		if s.Index == to {
			target = s.ID
		}
	}
	if target == 0 {
		return from, fmt.Errorf("etcd member %s does not answer", memberName(to))
	}
	if from == to {
		return from, nil
	}
	if _, err := c.runTool(ctx, etcdctl, "--endpoints="+c.ha.members[from].client, "--command-timeout=10s",
		"move-leader", strconv.FormatUint(target, 16)); err != nil {
		return from, err
	}
	return from, nil
}

// EtcdRevision is the highest revision a running member has applied.
func (c *Cluster) EtcdRevision(ctx context.Context) (int64, error) {
	st, err := c.EtcdStatus(ctx)
	if err != nil {
		return 0, err
	}
	var rev int64
	for _, s := range st {
		rev = max(rev, s.Revision)
	}
	return rev, nil
}

// Snapshot saves a snapshot of the etcd store to path (etcdctl snapshot
// save, from a member that answers) and returns its revision (etcdutl
// snapshot status).
func (c *Cluster) Snapshot(ctx context.Context, path string) (int64, error) {
	if err := c.requireHA(); err != nil {
		return 0, err
	}
	var err error
	for i, m := range c.ha.members {
		if !c.EtcdMemberRunning(i) {
			continue
		}
		if _, err = c.runTool(ctx, etcdctl, "--endpoints="+m.client, "snapshot", "save", path); err == nil {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	b, err := c.runTool(ctx, etcdutl, "snapshot", "status", path, "-w", "json")
	if err != nil {
		return 0, err
	}
	var st struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, fmt.Errorf("etcdutl snapshot status %s: cannot read %q: %w", path, b, err)
	}
	return st.Revision, nil
}

// RestoreOptions are the options of an etcd restore.
type RestoreOptions struct {
	// BumpRevision, when above zero, restores with etcdutl's
	// --bump-revision BumpRevision --mark-compacted: every revision after
	// the restore is above every revision before the snapshot plus
	// BumpRevision, and watches and reads at older revisions are refused
	// as compacted (clients list again).
	BumpRevision int64
	// Crash stops the API servers and the members with SIGKILL, as a
	// control plane that failed before it is restored: their clients'
	// connections break rather than end cleanly, and their informers list
	// anew. Without it they stop gracefully (SIGTERM), as in a planned
	// restore.
	Crash bool
	// MembersUp, if set, runs once the restored members are up and before
	// the API servers start: nothing has been written through them yet
	// (a test starts following the store there, FollowStorage).
	MembersUp func() error
}

// Restore restores the etcd cluster from a snapshot, the way it is done on a
// real control plane: the API servers stop, then the etcd members; each
// member's data directory is made anew from the snapshot with etcdutl
// snapshot restore (its name, the cluster's members and token, and the
// options); the members start, then the API servers, which list everything
// anew.
func (c *Cluster) Restore(ctx context.Context, snapshot string, o RestoreOptions) error {
	if err := c.requireHA(); err != nil {
		return err
	}
	// The store's watches end here, without a gap: the store they follow
	// is about to be replaced.
	c.specsMu.Lock()
	if c.ha.store != nil {
		c.ha.store.close()
		c.ha.store = nil
	}
	c.specsMu.Unlock()
	stop := func(name string) error {
		if o.Crash {
			return c.kill(name)
		}
		return c.stop(name, 30*time.Second)
	}
	for i := range c.ha.ports {
		if err := stop(serverName(i)); err != nil {
			return err
		}
	}
	for i := range c.ha.members {
		if err := stop(memberName(i)); err != nil {
			return err
		}
	}
	for i, m := range c.ha.members {
		dir := filepath.Join(c.Dir, m.name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		args := []string{"snapshot", "restore", snapshot, "--name", m.name, "--data-dir", dir,
			"--initial-cluster", c.ha.initialCluster(), "--initial-cluster-token", etcdClusterToken,
			"--initial-advertise-peer-urls", m.peer}
		if o.BumpRevision > 0 {
			args = append(args, "--bump-revision", strconv.FormatInt(o.BumpRevision, 10), "--mark-compacted")
		}
		if _, err := c.runTool(ctx, etcdutl, args...); err != nil {
			return fmt.Errorf("restore etcd member %d: %w", i, err)
		}
	}
	for i := range c.ha.members {
		if err := c.restart(memberName(i)); err != nil {
			return err
		}
	}
	for i := range c.ha.members {
		if err := c.waitMember(ctx, i, 60*time.Second); err != nil {
			return err
		}
	}
	if o.MembersUp != nil {
		if err := o.MembersUp(); err != nil {
			return err
		}
	}
	for i := range c.ha.ports {
		if err := c.restart(serverName(i)); err != nil {
			return err
		}
	}
	return c.waitServers(ctx, 90*time.Second)
}
