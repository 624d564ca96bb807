// Package fencedcontroller lets a controller-runtime manager run as a
// candidate of a FencedLease instead of using leader election, and fences
// every write its controllers make.
//
// Leader election does not stop a leader that was paused, partitioned or
// slow to notice: client-go says so itself ("does not guarantee that only
// one client is acting as a leader (a.k.a. fencing)"). A FencedLease gives
// each grant a fence, a number that grows with every grant, and the
// operator's fencing webhook rejects a write to a protected object unless
// it comes from the current holder pod with the current fence. This
// package makes both halves work for a controller:
//
//   - NewManager returns a manager whose runnables that need leader
//     election (controllers, by default) start only once this pod holds a
//     grant. The FencedLease must have spec.renewal Holder: the pod renews
//     its own grant through a fence.Session and holds it only until its own
//     deadline (the send time of its last successful renewal plus the lease
//     duration, minus a margin, on its monotonic clock); the controllers are
//     stopped before that deadline: as soon as the grant ends, and at the
//     latest Options.StopLead before the deadline when no renewal came in
//     time. Under spec.renewal Operator a pod cannot know when its grant
//     ends, so Start returns ErrOperatorRenewal before any controller starts,
//     as soon as the Lease records the mode. The
//     manager's Start then returns ErrLeaderElectionLost, as
//     controller-runtime's returns "leader election lost": controllers
//     cannot be started twice in one process, so the program exits, and its
//     pod, restarted, is a candidate again.
//   - The manager's GetClient, and NewClient around any client, send a
//     write only right after asking the Session whether the grant is still
//     held by its own clock (a paused process's timers fire late; the
//     clock does not), and stamp the fence where the fencing webhook checks
//     one, on objects labelled fencedlease.io/protected-by: the annotation
//     fencedlease.io/fence on creates, updates, patches and applies of a
//     main resource, and the field manager
//     "<manager>;fencedlease.io/fence=<N>" (FieldManager) on writes of a
//     subresource. A delete carries no fence, so a protected object is
//     stamped first and that version deleted. Other objects (Pods,
//     unlabelled ones) are written as a plain client writes them. Without a
//     valid grant the client sends nothing, protected or not, and returns
//     an error wrapping fence.ErrNotHolder.
//
// A write that passed the client's check the instant before the grant ended
// still reaches the API server, with the old fence: the webhook rejects it.
// That is the point of a fence: the holder's own view can be wrong, the
// destination's check cannot.
//
// # Why not a resource lock
//
// controller-runtime lets a manager's leader election use any
// resourcelock.Interface (manager.Options.LeaderElectionResourceLockInterface),
// so a lock backed by the Session was the obvious first design. It was not
// chosen, because the elector that drives the lock decides the timing, not
// the lock: client-go's LeaderElector declares leadership lost only when
// renewals have failed for RenewDeadline, polled every RetryPeriod, that is
// up to RenewDeadline after the lock first says the grant is over; and a
// candidate notices a grant only at its next RetryPeriod poll. The lock would
// also have to invent LeaderElectionRecords for an elector that judges
// expiry itself from the times it observed them. Neither is the holder's own
// deadline. So NewManager builds a manager with leader election off and
// takes the leader-election runnables itself: Add sorts runnables by the
// manager's own rule (caches and webhook servers run at once; a runnable that
// does not say it needs no leader election waits for the grant), and a
// runnable of the manager, the candidate, starts and stops them. The manager
// reports the end of a grant the way controller-runtime reports a lost
// election: Start returns an error.
//
// # Sharded managers
//
// NewShardedManager runs a manager as one of the pods of a FencedShardSet,
// which grants each of its shards to one pod with a fence and projects the
// pod's shards to its shards file (fence.ReadShards). Every pod runs its
// controllers; each reconciles only the objects of the shards its pod
// holds (ShardedManager.Controller: Predicate filters the events of other
// shards, Gained enqueues a shard's objects when it is gained, Reconciler
// skips a request of a shard no longer held), ShardOf (ShardByName,
// ShardByLabel) saying which shard an object is in. Its client
// (NewShardedClient) sends a write only of an object of a shard the pod
// holds by its latest reading of the file, labelled with that shard and
// stamped with that shard's fence by the code above; every other write,
// unprotected ones included, is refused unsent (ErrShardNotHeld), Events
// excepted. A set has only renewal Operator, so a pod can be late to learn
// that a shard moved; since every write it sends is checked by the
// webhook, such a late write is rejected at the destination.
//
// Adopting it in a kubebuilder main.go is a few lines: docs/controllers.md.
package fencedcontroller
