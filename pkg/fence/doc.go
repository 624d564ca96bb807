// Package fence lets a workload read and watch the fencing token that the
// fencedlease operator publishes to the pods of a singleton workload.
//
// A lease with a TTL cannot stop a paused process: when the process resumes it
// still believes it holds the lease. A fencing token can: it is a number that
// grows with every grant, the holder carries it on every write, and the
// destination rejects a write whose token is lower than the highest it has
// accepted. The operator publishes the token as pod annotations, and the
// kubelet projects them through a downward-API volume into three files,
// by default in /etc/fencedlease:
//
//	fence  decimal token on the holder, empty on standbys
//	role   "holder" or "standby"
//	lease  name of the FencedLease
//
// The kubelet replaces the three files atomically (a timestamped directory
// behind a "..data" symlink that is swapped with a rename). [Read] relies on
// that to never return a mix of old and new files. When there is no "..data"
// symlink (plain files, local development) the files are read directly.
//
// [Watcher] follows the files with inotify events and a slow polling
// fallback. [Watcher.WaitHolder] blocks until this pod is the holder, and
// [Watcher.HolderContext] returns a context that is cancelled as soon as the
// pod stops being the holder or the fence changes: a new grant is a new
// holdership, and work started under the old one must stop.
//
// Holding the token is not proof of authority on its own: the files change
// a little after the operator moves the lease, and a paused process reads
// them late. Every side effect must carry the token so that the destination
// can reject it. [Stamp] puts it on a ConfigMap or Secret write for the
// operator's fencing webhook; package fencesql does the same for SQL rows.
//
// The package imports no Kubernetes library so that it can be used from a
// small static binary.
package fence
